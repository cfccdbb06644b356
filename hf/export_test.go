package hf

// SetReadChunk makes ReadParams read n elements at a time; the returned func restores it.
func SetReadChunk(n int) (restore func()) {
	old := readChunk
	readChunk = n
	return func() { readChunk = old }
}
