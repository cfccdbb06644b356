package main

import (
	"fmt"

	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
)

// gptPreset is gpt.Preset for --model, saying that a BERT preset needs --arch bert (it was an
// unknown model).
func gptPreset(name string) (gpt.Config, error) {
	c, err := gpt.Preset(name)
	if _, bertErr := bert.Preset(name); err != nil && bertErr == nil {
		return c, fmt.Errorf("--model %s is a BERT preset; add --arch bert", name)
	}
	return c, err
}

// bertPreset is bert.Preset for --model with --arch bert, saying that a GPT-2 preset needs no
// --arch bert.
func bertPreset(name string) (bert.Config, error) {
	c, err := bert.Preset(name)
	if _, gptErr := gpt.Preset(name); err != nil && gptErr == nil {
		return c, fmt.Errorf("--model %s is a GPT-2 preset; leave out --arch bert", name)
	}
	return c, err
}
