package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// printSamples generates n samples of prompt (ids) as one batch and prints them to stdout: the
// first streams as it is generated, the others follow it, each after a separator line when there
// are several. The speed of the prompt and of generation, and a notice if the context fills, go to
// stderr, so stdout is only the text. Cancelling ctx stops the generation; what was generated
// until then is printed.
func printSamples(ctx context.Context, model *gpt.Model, ids []int32, prompt string, tok tokenizer.Tokenizer, opts gpt.SampleOptions, n int, stdout, stderr io.Writer) error {
	opts.Notices = stderr
	opts.Context = model.Config.BlockSize
	separator := func(i int) {
		if n > 1 {
			fmt.Fprintf(stdout, "---- sample %d of %d ----\n", i+1, n)
		}
	}
	// The first sample's head goes out with its first token, or once the generation is done,
	// so that a refusal (the KV cache does not fit) prints no text.
	started := false
	start := func() {
		if !started {
			started = true
			separator(0)
			fmt.Fprint(stdout, prompt)
		}
	}
	prev := int(ids[len(ids)-1]) // sample 0's last token so far
	seqs, stats, err := model.GenerateBatch(ctx, ids, n, opts, func(i int, id int32) {
		if i == 0 {
			start()
			fmt.Fprint(stdout, continuation(tok, prev, []int{int(id)}))
			prev = int(id)
		}
	})
	if len(seqs) > 0 { // the others, printed from what the batch returns
		start()
		fmt.Fprintln(stdout)
		for i := 1; i < len(seqs); i++ {
			separator(i)
			newIDs := make([]int, 0, len(seqs[i])-len(ids))
			for _, id := range seqs[i][len(ids):] {
				newIDs = append(newIDs, int(id))
			}
			fmt.Fprintln(stdout, prompt+continuation(tok, int(ids[len(ids)-1]), newIDs))
		}
	}
	if err != nil {
		return err
	}
	if opts.Tokens > 0 {
		how := "KV cache"
		if opts.NoCache {
			how = "no cache"
		}
		then := "" // the tokens after the first, when there are any
		if stats.NewTokens > 1 {
			then = fmt.Sprintf(" | then %d tokens x %d in %.2f s (%.1f tok/s)", stats.NewTokens-1, n, stats.Gen.Seconds(), stats.GenTokPerSec())
		}
		fmt.Fprintf(stderr, "prompt: %d tokens x %d in %.2f s (%.1f tok/s)%s | %s, %s\n",
			stats.PromptTokens, n, stats.Prompt.Seconds(), stats.PromptTokPerSec(), then, how, model.Backend().Name())
	}
	return nil
}

// continuation is the text that ids add after the token before: what decoding both adds to
// decoding before alone. A tokenizer whose Decode joins tokens with spaces (WordPiece: "the"
// "king" reads "the king", "king" "##s" reads "kings") spaces the first of ids as it would mid-
// text, where decoding ids alone would glue it to what came before.
func continuation(tok tokenizer.Tokenizer, before int, ids []int) string {
	head := tok.Decode([]int{before})
	all := tok.Decode(append([]int{before}, ids...))
	if rest, ok := strings.CutPrefix(all, head); ok {
		return rest
	}
	return tok.Decode(ids)
}
