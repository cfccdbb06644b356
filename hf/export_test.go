package hf

// SetReadChunk makes ReadParams read n elements at a time; the returned func restores it.
func SetReadChunk(n int) (restore func()) {
	old := readChunk
	readChunk = n
	return func() { readChunk = old }
}

// SetWriteFile replaces the writer of config.json and the tokenizer files; the returned func
// restores it.
func SetWriteFile(f func(path string, data []byte) error) (restore func()) {
	old := writeFile
	writeFile = f
	return func() { writeFile = old }
}
