// Package checkpoint saves and loads training checkpoints: the flat parameter array, the AdamW
// moments and the trainer's own config and state, in one checksummed safetensors file that any
// safetensors tool can open. It also names, lists, picks and prunes the checkpoints of a run
// directory.
//
// File layout: one F32 tensor per parameter tensor, under its own name ("wte", "wpe", ...) in
// the order of the flat array, then "adam_m.<name>" for each, then "adam_v.<name>" for each, so
// the data buffer is exactly Params, M, V back to back. The metadata holds
//
//	format         "gpt2go-checkpoint"
//	version        "1"
//	step           the optimizer step the state is at
//	config, state  the trainer's JSON, stored as strings
//	created        RFC 3339 time of saving
//	software       what wrote the file, e.g. "gpt2go v0.3.0"
//	num_params     number of parameters
//	crc32c         CRC-32C (Castagnoli) of the data buffer, 8 hex digits
//	header_crc32c  CRC-32C of everything else in the header (see headerCRC)
//
// The two checksums make any single flipped byte anywhere in the file a load error, rather than
// a silently different model or a resumed run that reads the wrong data-loader position.
package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/safetensors"
)

const (
	// Format is the "format" metadata value of every gpt2go checkpoint.
	Format = "gpt2go-checkpoint"
	// Version is the newest checkpoint version this package reads, and the one it writes.
	Version = 1
)

// Metadata keys.
const (
	keyFormat    = "format"
	keyVersion   = "version"
	keyStep      = "step"
	keyConfig    = "config"
	keyState     = "state"
	keyCreated   = "created"
	keySoftware  = "software"
	keyNumParams = "num_params"
	keyCRC       = "crc32c"
	keyHeaderCRC = "header_crc32c"
)

// Moment tensor name prefixes: "adam_m.wte" holds the first AdamW moment of "wte".
const (
	prefixM = "adam_m."
	prefixV = "adam_v."
)

// ioChunk is how many float32s Save and Load move per call (4 MiB), so each chunk is checksummed
// while it is still in cache.
const ioChunk = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors, wrapped by Load's errors so callers can tell them apart.
var (
	ErrCorrupt       = errors.New("checkpoint is corrupt")
	ErrNotCheckpoint = errors.New("not a gpt2go checkpoint")
	ErrTooNew        = errors.New("checkpoint version is too new")
)

// ParamTensor is a named view of the flat parameter array: Params[Offset : Offset+product(Shape)].
type ParamTensor struct {
	Name   string
	Shape  []int
	Offset int
}

// Checkpoint is everything needed to resume training, or, with M and V nil, just the weights.
type Checkpoint struct {
	Step int
	// Config and State are the trainer's own JSON (model and training config; data-loader
	// position, RNG state, ...). Either may be empty.
	Config json.RawMessage
	State  json.RawMessage
	// Tensors are the views of Params in llm.c's order (wte, wpe, ln1w, ...); they must tile
	// Params exactly, in order.
	Tensors []ParamTensor
	Params  []float32
	// M and V are the AdamW moments, laid out like Params; both nil in a weights-only checkpoint.
	M, V []float32
	// Software names what wrote the checkpoint, e.g. "gpt2go v0.3.0"; informational only.
	Software string
	// Created is when the checkpoint was saved. Save uses the current time when it is zero.
	Created time.Time

	// Stream, for Save, stands for Params, M and V (which are then nil) when they live
	// elsewhere (on a GPU): it hands array 0 (the parameters), 1 and 2 (the moments, when
	// StreamMoments) to sink in consecutive chunks, NumParams() values each. Save reads each
	// array twice (the checksum goes in the header, before the data), so both passes must see
	// the same values; a value that changes fails the save.
	Stream        func(array int, sink func(off int, chunk []float32) error) error
	StreamMoments bool

	// source reads Params (and M and V) from the file when Verify left them there.
	source *dataSource
}

// dataSource is where Verify found the flat arrays: in path's file f, kept open, n float32s
// each from offset on (Params, then M and V when moments is set), whose CRC-32Cs are crc.
type dataSource struct {
	path    string
	f       *os.File
	offset  int64
	n       int
	moments bool
	crc     [3]uint32
}

// Save writes c to path atomically: a reader (or a crash) sees the old file or the complete new
// one. The parameters are streamed to disk without being copied. The directory is created if
// needed.
func Save(path string, c *Checkpoint) error {
	specs, err := c.specs()
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", path, err)
	}
	created := c.Created
	if created.IsZero() {
		created = time.Now()
	}
	meta := map[string]string{
		keyFormat:    Format,
		keyVersion:   strconv.Itoa(Version),
		keyStep:      strconv.Itoa(c.Step),
		keyConfig:    string(c.Config),
		keyState:     string(c.State),
		keyCreated:   created.UTC().Format(time.RFC3339Nano),
		keySoftware:  c.Software,
		keyNumParams: strconv.Itoa(c.numSaved()),
	}
	// The checksum goes in the header, which precedes the data, so it is computed in a pass over
	// memory first (CRC-32C runs far faster than any disk); the streamed bytes are checked
	// against it below.
	dataCRC := crc32.New(castagnoli)
	if err := c.eachSaved(func(chunk []float32) error {
		return safetensors.WriteFloat32s(dataCRC, chunk) // hash writes never fail
	}); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", path, err)
	}
	meta[keyCRC] = fmt.Sprintf("%08x", dataCRC.Sum32())
	meta[keyHeaderCRC] = fmt.Sprintf("%08x", headerCRC(meta, specs))

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	// atomicfile's errors name the file.
	err = atomicfile.Write(path, func(w io.Writer) error {
		streamed := crc32.New(castagnoli)
		sw, err := safetensors.NewWriter(io.MultiWriter(w, streamed), specs, meta)
		if err != nil {
			return err
		}
		streamed.Reset() // the checksum covers the data buffer, not the header NewWriter just wrote
		if err := c.eachSaved(sw.WriteFloat32s); err != nil {
			return err
		}
		if err := sw.Close(); err != nil {
			return err
		}
		if streamed.Sum32() != dataCRC.Sum32() {
			return errors.New("parameters changed while they were being written; is something updating them concurrently with Save?")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// numSaved is the number of parameters Save writes: len(Params), or NumParams() with Stream.
func (c *Checkpoint) numSaved() int {
	if c.Stream != nil {
		return c.NumParams()
	}
	return len(c.Params)
}

// savesMoments says whether Save writes the AdamW moments.
func (c *Checkpoint) savesMoments() bool {
	if c.Stream != nil {
		return c.StreamMoments
	}
	return c.M != nil || c.V != nil
}

// eachSaved hands Save's data buffer to write a chunk at a time, in file order: Params, M and V
// (checking that Stream gives each array whole, in order).
func (c *Checkpoint) eachSaved(write func(chunk []float32) error) error {
	if c.Stream == nil {
		for _, x := range c.buffers() {
			for chunk := range slices.Chunk(x, ioChunk) {
				if err := write(chunk); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if c.Params != nil || c.M != nil || c.V != nil {
		return errors.New("a checkpoint with Stream must leave Params, M and V nil")
	}
	n, arrays := c.NumParams(), 1
	if c.StreamMoments {
		arrays = 3
	}
	for i := range arrays {
		next := 0
		err := c.Stream(i, func(off int, chunk []float32) error {
			if off != next || len(chunk) > n-off {
				return fmt.Errorf("array %d: a chunk of %d at %d after %d of %d values", i, len(chunk), off, next, n)
			}
			next += len(chunk)
			return write(chunk)
		})
		if err != nil {
			return err
		}
		if next != n {
			return fmt.Errorf("array %d: %d of %d values", i, next, n)
		}
	}
	return nil
}

// buffers returns the flat arrays in file order.
func (c *Checkpoint) buffers() [][]float32 {
	if c.source != nil {
		return nil
	}
	if c.M == nil && c.V == nil {
		return [][]float32{c.Params}
	}
	return [][]float32{c.Params, c.M, c.V}
}

// specs checks that c is well formed and returns its tensors in file order.
func (c *Checkpoint) specs() ([]safetensors.Spec, error) {
	if c.Step < 0 {
		return nil, fmt.Errorf("negative step %d", c.Step)
	}
	for _, js := range []struct {
		name string
		raw  json.RawMessage
	}{{keyConfig, c.Config}, {keyState, c.State}} {
		if len(js.raw) > 0 && !json.Valid(js.raw) {
			return nil, fmt.Errorf("%s is not valid JSON", js.name)
		}
	}
	hasMoments, numParams := c.savesMoments(), c.numSaved()
	if c.Stream == nil && hasMoments && (len(c.M) != len(c.Params) || len(c.V) != len(c.Params)) {
		return nil, fmt.Errorf("AdamW moments have %d and %d elements, parameters %d; want both equal to the parameters", len(c.M), len(c.V), len(c.Params))
	}
	params := make([]safetensors.Spec, len(c.Tensors))
	seen := map[string]bool{}
	offset := 0
	for i, t := range c.Tensors {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("parameter tensor %d has no name", i)
		case strings.HasPrefix(t.Name, prefixM) || strings.HasPrefix(t.Name, prefixV):
			return nil, fmt.Errorf("parameter tensor name %q uses a prefix reserved for AdamW moments", t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("duplicate parameter tensor %q", t.Name)
		case t.Offset != offset:
			return nil, fmt.Errorf("parameter tensor %q starts at %d, want %d: tensors must tile Params in order", t.Name, t.Offset, offset)
		}
		seen[t.Name] = true
		params[i] = safetensors.Spec{Name: t.Name, DType: "F32", Shape: t.Shape}
		n, err := params[i].NumBytes()
		if err != nil {
			return nil, err
		}
		if n/4 > int64(numParams-offset) {
			return nil, fmt.Errorf("parameter tensor %q %v runs past the end of Params (%d elements)", t.Name, t.Shape, numParams)
		}
		offset += int(n / 4)
	}
	if offset != numParams {
		return nil, fmt.Errorf("parameter tensors cover %d of %d parameters", offset, numParams)
	}
	specs := params
	if hasMoments {
		specs = append(slices.Clip(params), withPrefix(prefixM, params)...)
		specs = append(specs, withPrefix(prefixV, params)...)
	}
	return specs, nil
}

func withPrefix(prefix string, specs []safetensors.Spec) []safetensors.Spec {
	out := make([]safetensors.Spec, len(specs))
	for i, s := range specs {
		out[i] = safetensors.Spec{Name: prefix + s.Name, DType: s.DType, Shape: s.Shape}
	}
	return out
}

// headerCRC is the CRC-32C of every metadata entry but header_crc32c (sorted by key) and of each
// tensor's name, dtype and shape in file order, each string and number length-prefixed or
// varint-encoded so that no two headers serialize alike. The data offsets need no cover: they
// follow from the order and shapes, which the reader checks tile the buffer. The JSON text itself
// is not hashed, so a tool that rewrites the header with different spacing keeps it valid.
func headerCRC(meta map[string]string, tensors []safetensors.Spec) uint32 {
	var b []byte
	appendString := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if k != keyHeaderCRC {
			appendString(k)
			appendString(meta[k])
		}
	}
	b = binary.AppendUvarint(b, uint64(len(tensors)))
	for _, t := range tensors {
		appendString(t.Name)
		appendString(t.DType)
		b = binary.AppendUvarint(b, uint64(len(t.Shape)))
		for _, d := range t.Shape {
			b = binary.AppendVarint(b, int64(d))
		}
	}
	return crc32.Checksum(b, castagnoli)
}

// loadError is a Load failure: one line naming the file, what is wrong with it and what to do.
type loadError struct {
	path    string
	problem string // follows "checkpoint PATH "
	advice  string // follows the problem after "; " ("": none)
	kind    error  // sentinel or underlying error, for errors.Is
}

func (e *loadError) Error() string {
	if e.advice == "" {
		return "checkpoint " + e.path + " " + e.problem
	}
	return "checkpoint " + e.path + " " + e.problem + "; " + e.advice
}

func (e *loadError) Unwrap() error { return e.kind }

// Problem returns what a Load error says is wrong with its file ("is corrupt (checksum
// mismatch)", "is truncated (...)"), without the path and the advice, for a list of files;
// another error's text for other errors.
func Problem(err error) string {
	var le *loadError
	if errors.As(err, &le) {
		return le.problem
	}
	return err.Error()
}

// olderAdvice is what to do about a damaged checkpoint: take an older one, as LoadLatest does
// itself for a run directory.
const olderAdvice = "use an older checkpoint"

func corrupt(path, format string, args ...any) error {
	return &loadError{path: path, problem: "is corrupt (" + fmt.Sprintf(format, args...) + ")", advice: olderAdvice, kind: ErrCorrupt}
}

// Load reads and verifies the checkpoint at path. Every error is one line that names the file
// and says what is wrong with it; errors wrap ErrCorrupt, ErrNotCheckpoint, ErrTooNew or, for a
// missing file, fs.ErrNotExist.
func Load(path string) (*Checkpoint, error) { return loadFile(path, everything) }

// LoadWeights is Load for a reader of the weights alone (sampling, evaluation, export): it
// verifies the whole file as Load does, but streams the AdamW moments through the checksum
// without keeping them, so M and V are nil and the checkpoint takes a third of the memory.
func LoadWeights(path string) (*Checkpoint, error) { return loadFile(path, weightsOnly) }

// Verify is Load for a reader with somewhere else to put the arrays (a model on a backend), so
// that they are never held twice: it verifies the whole file as Load does, but reads the data
// only through the checksum, leaving Params, M and V nil. ReadParams and ReadMoments then read
// them from the file a chunk at a time (and check them again). The file stays open until
// Close, so a running trainer that prunes or replaces the checkpoint in the meantime does not
// take it away.
func Verify(path string) (*Checkpoint, error) { return loadFile(path, lazy) }

// Close closes the file Verify kept open (a no-op for other checkpoints); ReadParams and
// ReadMoments cannot be called after it.
func (c *Checkpoint) Close() error {
	if c.source == nil || c.source.f == nil {
		return nil
	}
	f := c.source.f
	c.source.f = nil
	return f.Close()
}

// What loadFile keeps of a checkpoint's data.
const (
	everything  = 0 // Load
	weightsOnly = 1 // LoadWeights: the parameters, not the moments
	lazy        = 2 // Verify: nothing (ReadParams and ReadMoments read it later)
)

// NumParams is the length of the flat parameter array (which Params holds unless Verify left it
// in the file).
func (c *Checkpoint) NumParams() int {
	if len(c.Tensors) == 0 {
		return 0
	}
	last := c.Tensors[len(c.Tensors)-1]
	n := 1
	for _, d := range last.Shape {
		n *= d
	}
	return last.Offset + n
}

// HasMoments says whether the checkpoint holds the AdamW moments (in M and V, or in the file
// Verify left them in); a weights-only export does not.
func (c *Checkpoint) HasMoments() bool {
	if c.source != nil {
		return c.source.moments
	}
	return c.M != nil && c.V != nil
}

// ReadParams calls sink with the flat parameter array in order, a chunk at a time (off is the
// chunk's offset in the array): from Params, or from the file that Verify verified, and then,
// if what it read no longer matches the checksum taken then (the file was replaced or damaged
// since), it returns an ErrCorrupt error and sink has seen wrong values. sink's chunks are only
// valid during the call. An error from sink stops the reading and is returned.
func (c *Checkpoint) ReadParams(sink func(off int, chunk []float32) error) error {
	return c.read(0, c.Params, sink)
}

// ReadMoments is ReadParams for the AdamW moments: all of M into m, then all of V into v.
func (c *Checkpoint) ReadMoments(m, v func(off int, chunk []float32) error) error {
	if !c.HasMoments() {
		name := "the checkpoint"
		if c.source != nil {
			name = "checkpoint " + c.source.path
		}
		return fmt.Errorf("%s holds no AdamW moments (it is a weights-only export)", name)
	}
	if err := c.read(1, c.M, m); err != nil {
		return err
	}
	return c.read(2, c.V, v)
}

// read hands flat array i (0 Params, 1 M, 2 V) to sink: mem, or the file's copy.
func (c *Checkpoint) read(i int, mem []float32, sink func(off int, chunk []float32) error) error {
	if c.source == nil {
		for off := 0; off < len(mem); off += ioChunk {
			if err := sink(off, mem[off:min(off+ioChunk, len(mem))]); err != nil {
				return err
			}
		}
		return nil
	}
	src := c.source
	if src.f == nil {
		return &loadError{path: src.path, problem: "was closed after it was verified", advice: "load it again"}
	}
	size := 4 * int64(src.n)
	crc := crc32.New(castagnoli)
	r := io.TeeReader(io.NewSectionReader(src.f, src.offset+int64(i)*size, size), crc)
	changed := &loadError{path: src.path, problem: "changed since it was verified (checksum mismatch)", advice: "run the command again", kind: ErrCorrupt}
	buf := make([]float32, min(ioChunk, src.n))
	for off := 0; off < src.n; off += len(buf) {
		chunk := buf[:min(len(buf), src.n-off)]
		if err := safetensors.ReadFloat32s(r, chunk); errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return changed // truncated since
		} else if err != nil {
			return &loadError{path: src.path, problem: "cannot be read again: " + err.Error(), kind: err}
		}
		if err := sink(off, chunk); err != nil {
			return err
		}
	}
	if crc.Sum32() != src.crc[i] {
		return changed
	}
	return nil
}

func loadFile(path string, keep int) (*Checkpoint, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &loadError{path: path, problem: "does not exist", kind: err}
	}
	if err != nil {
		return nil, &loadError{path: path, problem: "cannot be opened: " + err.Error(), kind: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &loadError{path: path, problem: "cannot be read: " + err.Error(), kind: err}
	}
	c, err := load(path, f, st.Size(), keep)
	if err != nil || c.source == nil {
		f.Close()
		return c, err
	}
	c.source.f = f // Verify: ReadParams and ReadMoments read the data from it later
	return c, nil
}

// load verifies and decodes a checkpoint of size bytes read from r, keeping what keep says;
// path names it in errors.
func load(path string, r io.ReaderAt, size int64, keep int) (*Checkpoint, error) {
	if size == 0 {
		return nil, &loadError{path: path, problem: "is empty", advice: olderAdvice, kind: ErrCorrupt}
	}
	h, err := safetensors.ReadHeader(r, size)
	if errors.Is(err, safetensors.ErrTruncated) {
		why := strings.TrimSuffix(err.Error(), ": "+safetensors.ErrTruncated.Error())
		return nil, &loadError{path: path, problem: "is truncated (" + why + ")", advice: olderAdvice, kind: ErrCorrupt}
	}
	if err != nil {
		return nil, &loadError{path: path, problem: "is not a valid safetensors file (" + err.Error() + ")", kind: ErrNotCheckpoint}
	}
	c, err := decodeHeader(path, h, keep)
	if err != nil {
		return nil, err
	}
	if err := readData(r, h, c); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, corrupt(path, "checksum mismatch")
		}
		return nil, &loadError{path: path, problem: "cannot be read: " + err.Error(), kind: err}
	}
	return c, nil
}

// decodeHeader checks the metadata and tensor table and returns the checkpoint with its flat
// arrays allocated but not yet filled.
func decodeHeader(path string, h *safetensors.Header, keep int) (*Checkpoint, error) {
	meta := h.Metadata
	format, hasFormat := meta[keyFormat]
	wantHeaderCRC, hasHeaderCRC := meta[keyHeaderCRC]
	switch {
	case !hasFormat:
		return nil, &loadError{path: path, problem: "is not a gpt2go checkpoint (no format in its metadata)", kind: ErrNotCheckpoint}
	case format != Format && !hasHeaderCRC:
		return nil, foreignFormat(path, format)
	case !hasHeaderCRC:
		return nil, corrupt(path, "no %s in the metadata", keyHeaderCRC)
	}
	specs := make([]safetensors.Spec, len(h.Tensors))
	for i, t := range h.Tensors {
		specs[i] = t.Spec()
	}
	// Checked before format and version, so that a flipped byte there reads as corruption.
	if fmt.Sprintf("%08x", headerCRC(meta, specs)) != wantHeaderCRC {
		return nil, corrupt(path, "header checksum mismatch")
	}
	if format != Format {
		return nil, foreignFormat(path, format)
	}
	version, err := strconv.Atoi(meta[keyVersion])
	switch {
	case err != nil || version < 1:
		return nil, corrupt(path, "invalid version %q", meta[keyVersion])
	case version > Version:
		return nil, &loadError{path: path, problem: fmt.Sprintf("has version %d, this gpt2go reads up to %d", version, Version), advice: "upgrade gpt2go", kind: ErrTooNew}
	}

	c := &Checkpoint{Software: meta[keySoftware]}
	if c.Step, err = strconv.Atoi(meta[keyStep]); err != nil || c.Step < 0 {
		return nil, corrupt(path, "invalid step %q", meta[keyStep])
	}
	for _, js := range []struct {
		key string
		dst *json.RawMessage
	}{{keyConfig, &c.Config}, {keyState, &c.State}} {
		s := meta[js.key]
		if s != "" && !json.Valid([]byte(s)) {
			return nil, corrupt(path, "%s is not valid JSON", js.key)
		}
		if s != "" {
			*js.dst = json.RawMessage(s)
		}
	}
	if s := meta[keyCreated]; s != "" {
		if c.Created, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return nil, corrupt(path, "invalid created time %q", s)
		}
	}
	if _, err := strconv.ParseUint(meta[keyCRC], 16, 32); err != nil || len(meta[keyCRC]) != 8 {
		return nil, corrupt(path, "invalid %s %q", keyCRC, meta[keyCRC])
	}

	if h.DataSize/4 > math.MaxInt {
		return nil, &loadError{path: path, problem: "is too large to load on this machine"}
	}
	// Parameters first, then their first and second moments, in the same order with the same
	// shapes: then the data buffer is Params, M, V back to back.
	tensors := h.Tensors
	numParamTensors := 0
	for numParamTensors < len(tensors) && !isMoment(tensors[numParamTensors].Name) {
		numParamTensors++
	}
	hasMoments := len(tensors) > numParamTensors
	if hasMoments && len(tensors) != 3*numParamTensors {
		return nil, corrupt(path, "%d parameter tensors but %d other tensors; want 0 or %d AdamW moments", numParamTensors, len(tensors)-numParamTensors, 2*numParamTensors)
	}
	numParams := 0
	for i, t := range tensors {
		param := tensors[i%max(numParamTensors, 1)]
		want := param.Name
		switch i / max(numParamTensors, 1) {
		case 1:
			want = prefixM + param.Name
		case 2:
			want = prefixV + param.Name
		}
		switch {
		case t.Name != want:
			return nil, corrupt(path, "tensor %d is %q, want %q", i, t.Name, want)
		case t.DType != "F32":
			return nil, corrupt(path, "tensor %q has dtype %s, want F32", t.Name, t.DType)
		case !slices.Equal(t.Shape, param.Shape):
			return nil, corrupt(path, "tensor %q has shape %v, want %v like %q", t.Name, t.Shape, param.Shape, param.Name)
		}
		if i < numParamTensors {
			n := int((t.End - t.Begin) / 4)
			c.Tensors = append(c.Tensors, ParamTensor{Name: t.Name, Shape: t.Shape, Offset: numParams})
			numParams += n
		}
	}
	if meta[keyNumParams] != strconv.Itoa(numParams) {
		return nil, corrupt(path, "%s is %q but the tensors hold %d", keyNumParams, meta[keyNumParams], numParams)
	}
	// Sizes were checked against the file's size by ReadHeader, so these allocations are bounded.
	if keep == lazy {
		c.source = &dataSource{path: path, offset: h.DataOffset, n: numParams, moments: hasMoments}
		return c, nil
	}
	c.Params = make([]float32, numParams)
	if hasMoments && keep == everything {
		c.M = make([]float32, numParams)
		c.V = make([]float32, numParams)
	}
	return c, nil
}

func isMoment(name string) bool {
	return strings.HasPrefix(name, prefixM) || strings.HasPrefix(name, prefixV)
}

// readData fills c's flat arrays from the data buffer, checksumming as it reads; what follows
// them (the moments that LoadWeights leaves out) only goes through the checksum. A checksum
// mismatch is ErrCorrupt. For Verify (c.source set) every array goes through the checksum
// only, and c.source keeps each one's own checksum for ReadParams and ReadMoments.
func readData(f io.ReaderAt, h *safetensors.Header, c *Checkpoint) error {
	crc := crc32.New(castagnoli)
	r := io.TeeReader(io.NewSectionReader(f, h.DataOffset, h.DataSize), crc)
	if src := c.source; src != nil {
		arrays := 1
		if src.moments {
			arrays = 3
		}
		for i := range arrays {
			part := crc32.New(castagnoli)
			if _, err := io.CopyN(part, r, 4*int64(src.n)); err != nil {
				return err
			}
			src.crc[i] = part.Sum32()
		}
	}
	for _, x := range c.buffers() {
		for chunk := range slices.Chunk(x, ioChunk) {
			if err := safetensors.ReadFloat32s(r, chunk); err != nil {
				return err
			}
		}
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if fmt.Sprintf("%08x", crc.Sum32()) != h.Metadata[keyCRC] {
		return ErrCorrupt
	}
	return nil
}

// foreignFormat is the error of a safetensors file of another format, with the way to read a
// Hugging Face (PyTorch, "pt") weights file.
func foreignFormat(path, format string) error {
	e := &loadError{path: path, problem: fmt.Sprintf("is not a gpt2go checkpoint (format %q, want %q)", format, Format), kind: ErrNotCheckpoint}
	if format == "pt" {
		e.advice = "a Hugging Face weights file is read with --init FILE (or its folder)"
	}
	return e
}
