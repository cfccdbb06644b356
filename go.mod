module github.com/gpt2go/gpt2go

go 1.26.0

require (
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/tiktoken-go/tokenizer v0.10.0
	golang.org/x/term v0.47.0
)

require (
	github.com/dlclark/regexp2/v2 v2.5.1 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
