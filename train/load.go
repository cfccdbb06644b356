package train

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/hf"
	"github.com/gpt2go/gpt2go/prepare"
	"github.com/gpt2go/gpt2go/safetensors"
)

// Loaded is a model read from a run directory, a checkpoint file, an llm.c model file or a
// Hugging Face GPT-2 model.
type Loaded struct {
	Config gpt.Config
	// Params are the weights, or nil when OpenWeights or OpenInit left them in their file:
	// ReadParams reads them either way.
	Params []float32
	Run    *Config // the training config, when the source was a gpt2go checkpoint
	Step   int
	Source string
	file   gpt.ParamsReader // OpenWeights' or OpenInit's reader of the file that holds Params
	close  func() error     // closes that file
}

// Close closes the file OpenWeights, OpenInit or OpenModel left open for ReadParams (a no-op for
// weights in memory); ReadParams fails after it.
func (l *Loaded) Close() error {
	l.file = nil
	return closeFile(&l.close)
}

// closeFile calls *c once, if set.
func closeFile(c *func() error) error {
	if *c == nil {
		return nil
	}
	f := *c
	*c = nil
	return f()
}

// ReadParams hands the weights to sink a chunk at a time (a gpt.ParamsReader): from Params, or
// from the file OpenWeights or OpenInit checked (a checkpoint's against its checksum again).
func (l *Loaded) ReadParams(sink func(off int, chunk []float32) error) error {
	return readParams(l.Params, l.file, l.Source, sink)
}

// readParams hands params to sink, or what file reads when params is nil.
func readParams(params []float32, file gpt.ParamsReader, source string, sink func(off int, chunk []float32) error) error {
	switch {
	case params != nil:
		return gpt.HostParams(params)(sink)
	case file != nil:
		return file(sink)
	}
	return fmt.Errorf("%s: the weights are no longer held (they were read once, or their file was closed); load the model again", source)
}

// OpenWeights is LoadWeights for a reader that puts the weights straight into a model
// (NewInferenceModel, gpt.NewInferenceInt8 with ReadParams): a gpt2go checkpoint is verified
// whole but its weights stay in the file until ReadParams reads them, so the process never
// holds them twice; an llm.c model file is read the same way.
func OpenWeights(path string) (*Loaded, error) {
	l, enc, err := loadModel(path, true)
	if err != nil {
		return nil, err
	}
	if enc != nil {
		enc.Close()
		return nil, notGPT(enc, path)
	}
	return l, nil
}

// LoadWeights reads GPT-2 weights from path: a run directory (its newest good checkpoint), a
// gpt2go checkpoint file, or an llm.c model file (recognised by its magic number).
func LoadWeights(path string) (*Loaded, error) {
	l, enc, err := LoadModel(path)
	if err != nil {
		return nil, err
	}
	if enc != nil {
		return nil, notGPT(enc, path)
	}
	return l, nil
}

// notGPT is the error for a BERT encoder at path where a GPT-2 is needed.
func notGPT(enc *LoadedBERT, path string) error {
	return fmt.Errorf("%s is a BERT encoder (masked-language model), which predicts masked tokens rather than the next one: sample, eval, export and HellaSwag take a GPT-2; gpt2go fill --ckpt %s --text \"... [MASK] ...\" shows its predictions", enc.Source, path)
}

// OpenModel is LoadModel leaving a checkpoint's weights in the verified file until ReadParams
// reads them into a model (OpenWeights, OpenBERT).
func OpenModel(path string) (*Loaded, *LoadedBERT, error) { return loadModel(path, true) }

// LoadModel reads the model at path, of either family: a GPT-2 (as LoadWeights) or a BERT
// encoder (as LoadBERT); exactly one of the two results is not nil.
func LoadModel(path string) (*Loaded, *LoadedBERT, error) { return loadModel(path, false) }

// loadModel is LoadModel, leaving a checkpoint's weights in its file when lazy (OpenWeights).
func loadModel(path string, lazy bool) (*Loaded, *LoadedBERT, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("load model: %w", err)
	}
	if !st.IsDir() && isLLMC(path) {
		open := LoadLLMC
		if lazy {
			open = openLLMC
		}
		l, err := open(path)
		return l, nil, err
	}
	ck, run, src, err := loadRun(path, st.IsDir(), lazy)
	if err != nil {
		return nil, nil, err
	}
	if run.IsBERT() {
		enc := &LoadedBERT{Config: run.BERT(), Params: ck.Params, Run: run, Step: ck.Step, Source: src}
		if ck.Params == nil {
			enc.file, enc.close = ck.ReadParams, ck.Close
		}
		return nil, enc, nil
	}
	l := &Loaded{Config: run.Model, Params: ck.Params, Run: run, Step: ck.Step, Source: src}
	if ck.Params == nil {
		l.file, l.close = ck.ReadParams, ck.Close
	}
	return l, nil, nil
}

// LoadedBERT is a BERT encoder read from a run directory or checkpoint.
type LoadedBERT struct {
	Config bert.Config
	Params []float32 // nil from OpenBERT: ReadParams reads them from the checkpoint file
	Run    *Config
	Step   int
	Source string
	file   gpt.ParamsReader
	close  func() error
}

// Close closes the file OpenBERT or OpenModel left open for ReadParams.
func (l *LoadedBERT) Close() error {
	l.file = nil
	return closeFile(&l.close)
}

// ReadParams hands the weights to sink a chunk at a time, as Loaded.ReadParams does.
func (l *LoadedBERT) ReadParams(sink func(off int, chunk []float32) error) error {
	return readParams(l.Params, l.file, l.Source, sink)
}

// LoadBERT reads a BERT run's weights from path: a run directory (its newest good checkpoint) or
// a checkpoint file.
func LoadBERT(path string) (*LoadedBERT, error) { return loadBERT(path, false) }

// OpenBERT is LoadBERT leaving the weights in the checkpoint file, verified, until ReadParams
// reads them into a model (as OpenWeights does for GPT-2).
func OpenBERT(path string) (*LoadedBERT, error) { return loadBERT(path, true) }

func loadBERT(path string, lazy bool) (*LoadedBERT, error) {
	l, enc, err := loadModel(path, lazy)
	if err != nil {
		return nil, err
	}
	if l != nil {
		l.Close()
		return nil, fmt.Errorf("%s is a GPT-2 model, which predicts the next token, not masked ones; use gpt2go sample --ckpt %s, or train an encoder with --arch bert", l.Source, path)
	}
	return enc, nil
}

// loadRun reads the weights of a gpt2go checkpoint (a run directory's newest good one, or a
// file; checkpoint.LoadWeights, or checkpoint.Verify when lazy) and its run config,
// checking the parameter count against the config.
func loadRun(path string, isDir, lazy bool) (*checkpoint.Checkpoint, *Config, string, error) {
	var ck *checkpoint.Checkpoint
	var err error
	src := path
	load, latest := checkpoint.LoadWeights, checkpoint.LoadLatestWeights
	if lazy {
		load, latest = checkpoint.Verify, checkpoint.LoadLatestVerified
	}
	if isDir {
		if path, err = runDirFor(path); err != nil {
			return nil, nil, "", err
		}
		var warnings []error
		ck, src, warnings, err = latest(path)
		for _, w := range warnings {
			fmt.Fprintf(os.Stderr, "warning: skipping %v\n", w)
		}
	} else {
		ck, err = load(path)
	}
	if err != nil {
		return nil, nil, "", err
	}
	run, err := runConfig(ck, src)
	if err != nil {
		ck.Close() // Verify's open file
		return nil, nil, "", err
	}
	return ck, run, src, nil
}

// runDirFor returns the run directory that the folder path names: path itself, or the run whose
// checkpoints folder path is. Any other folder gets a one-line error that says what to pass.
func runDirFor(path string) (string, error) {
	if isRunDir(path) {
		return path, nil // (a run without checkpoints yet: latest says so)
	}
	if run, ok := runOfCheckpointsFolder(path); ok {
		return run, nil
	}
	if present(filepath.Join(path, hf.WeightsFile)) || present(filepath.Join(path, hf.ConfigFile)) {
		return "", fmt.Errorf("%s is a Hugging Face model folder, not a gpt2go run; sample, eval, attn, export and train read it with --init %s", path, path)
	}
	return "", fmt.Errorf("%s is not a gpt2go run (it has no checkpoints folder); pass a run directory (train --out), a checkpoint file, or with --init an llm.c file or a Hugging Face folder", path)
}

// runOfCheckpointsFolder returns the run whose checkpoints folder path is: a folder named
// checkpoints ("." inside one counts) that is not itself a run. Symbolic links are kept as given.
func runOfCheckpointsFolder(path string) (string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil || filepath.Base(abs) != "checkpoints" || isRunDir(path) {
		return "", false
	}
	return filepath.Dir(abs), true
}

// CheckOutput returns a one-line error when a command's output path (an export, an image, a
// trace, a prepared dataset) would replace part of a run: the run directory or its checkpoints
// folder themselves, anything inside the checkpoints folder, or one of the files training
// writes beside it (run.json, log.jsonl, samples.txt, TensorBoard events). Writing beside them
// under another name is allowed.
func CheckOutput(path, flag string) error {
	clean := prepare.ResolvedPath(path) // through symbolic links: the run's files are what it reaches
	parent := filepath.Dir(clean)
	base := filepath.Base(clean)
	fi, err := os.Stat(clean)
	isDir := err == nil && fi.IsDir() // (isRunDir is true of any file: file/run.json is ENOTDIR)
	var run string
	switch {
	case isDir && isRunDir(clean):
		run = clean
	case isCheckpointsFolder(clean):
		run = filepath.Dir(clean)
	case isCheckpointsFolder(parent):
		run = filepath.Dir(parent)
	case isRunDir(parent) && (base == runFile || base == logFile || base == samplesFile || strings.HasPrefix(base, "events.out.tfevents")):
		run = parent
	default:
		return nil
	}
	return fmt.Errorf("%s %s would overwrite part of the training run %s (its folder, checkpoints or logs); choose another path", flag, path, run)
}

// isCheckpointsFolder reports whether path is the checkpoints folder of a run.
func isCheckpointsFolder(path string) bool {
	abs, err := filepath.Abs(path)
	return err == nil && filepath.Base(abs) == "checkpoints" && present(filepath.Join(filepath.Dir(abs), runFile))
}

// isRunDir reports whether path holds a run: its checkpoints folder or its run.json.
func isRunDir(path string) bool {
	return present(checkpoint.Dir(path)) || present(filepath.Join(path, runFile))
}

// present reports whether path exists or may exist: an error other than "does not exist"
// (permission denied) counts as present, so that reading it later names the real problem.
func present(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// ResumeDir returns the run directory that train --resume path continues: path, or the run
// whose checkpoints folder path is; a path that does not exist is an error (resuming creates
// nothing).
func ResumeDir(path string) (string, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("resume %s: no such run directory; start a run there with train --out %s", path, path)
	case err != nil:
		return "", fmt.Errorf("resume: %w", err)
	case !st.IsDir():
		return "", fmt.Errorf("resume %s: not a directory; pass the run directory (train --out), not one of its files", path)
	}
	if run, ok := runOfCheckpointsFolder(path); ok {
		return run, nil
	}
	if err := checkpoint.NotDataset(path); err != nil {
		return "", fmt.Errorf("resume: %w", err)
	}
	if err := interruptedForce(path); err != nil {
		return "", fmt.Errorf("resume: %w", err)
	}
	if !isRunDir(path) {
		return "", fmt.Errorf("resume %s: not a run directory (it has no run.json or checkpoints folder); pass the --out folder of a train run, or start one with train --out %s", path, path)
	}
	return path, nil
}

// SavedArch returns the model family recorded in run directory dir's run.json ("" for GPT-2, or
// when there is no readable run.json).
func SavedArch(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, runFile))
	if err != nil {
		return ""
	}
	var saved struct {
		Arch string `json:"arch"`
	}
	if json.Unmarshal(b, &saved) != nil {
		return ""
	}
	return saved.Arch
}

// RunArch returns the model family that path's run records in its run.json, for path a run
// directory, its checkpoints folder or a checkpoint file in that folder: "bert", or "" for GPT-2
// and when no run.json says (a checkpoint file kept elsewhere, an llm.c file). It reads run.json
// alone, verifying nothing, so a command can refuse the wrong family before anything else.
func RunArch(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	dir := path
	if !st.IsDir() {
		dir = filepath.Dir(path) // a file says its run only from the run's checkpoints folder
		if _, ok := runOfCheckpointsFolder(dir); !ok {
			return ""
		}
	}
	if run, ok := runOfCheckpointsFolder(dir); ok {
		dir = run
	}
	return SavedArch(dir)
}

// runConfig reads and checks the run config of checkpoint ck at src.
func runConfig(ck *checkpoint.Checkpoint, src string) (*Config, error) {
	var run Config
	if err := json.Unmarshal(ck.Config, &run); err != nil {
		return nil, fmt.Errorf("checkpoint %s has an unreadable config: %w", src, err)
	}
	if err := run.Model.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", src, err)
	}
	if ck.NumParams() != run.NumParams() {
		return nil, fmt.Errorf("checkpoint %s holds %d params but its config needs %d", src, ck.NumParams(), run.NumParams())
	}
	return &run, nil
}

// LoadLLMC reads an llm.c model file.
func LoadLLMC(path string) (*Loaded, error) {
	cfg, params, err := gpt.ReadLLMC(path)
	if err != nil {
		return nil, err
	}
	return &Loaded{Config: cfg, Params: params, Source: path}, nil
}

// openLLMC is LoadLLMC leaving the weights in the file until ReadParams (gpt.OpenLLMC).
func openLLMC(path string) (*Loaded, error) {
	cfg, read, closeLLMC, err := gpt.OpenLLMC(path)
	if err != nil {
		return nil, err
	}
	return &Loaded{Config: cfg, Source: path, file: read, close: closeLLMC}, nil
}

// InitHelp names what --init accepts, for flag help and errors.
const InitHelp = "an llm.c model file, a Hugging Face GPT-2 folder (config.json + model.safetensors) or its model.safetensors, or hf:OWNER/NAME from the Hub (e.g. hf:openai-community/gpt2)"

// ResolveInit returns the local file or folder that --init names: hf:OWNER/NAME[@REVISION] is
// downloaded into cacheDir ("" means prepare.DefaultCacheDir()) the first time, with progress
// bars on progress (may be nil); anything else is returned as it is.
func ResolveInit(ctx context.Context, spec, cacheDir string, progress io.Writer) (string, error) {
	if !strings.HasPrefix(spec, hf.SpecPrefix) {
		return spec, nil
	}
	if cacheDir == "" {
		var err error
		if cacheDir, err = prepare.DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	return hf.Download(ctx, spec, cacheDir, progress)
}

// LoadInit reads the pretrained weights --init names (see InitHelp), telling them apart by
// content: llm.c's magic number, a safetensors file with GPT-2's Hugging Face names, a folder
// with model.safetensors. hf:OWNER/NAME is resolved as ResolveInit does, in the default cache.
// progress (may be nil) gets download bars and notes about skipped tensors.
func LoadInit(ctx context.Context, spec string, progress io.Writer) (*Loaded, error) {
	l, err := OpenInit(ctx, spec, progress)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if l.Params, err = gpt.ReadAll(l.ReadParams, l.Config.NumParams()); err != nil {
		return nil, err
	}
	l.file = nil
	return l, nil
}

// OpenInit is LoadInit for a reader that puts the weights straight into a model: it checks the
// file's header (and for Hugging Face, config.json and every tensor's dtype and shape), and
// ReadParams reads the weights from the file when the model is there to take them.
func OpenInit(ctx context.Context, spec string, progress io.Writer) (*Loaded, error) {
	kind, path, err := resolveInit(ctx, spec, progress)
	if err != nil {
		return nil, err
	}
	if kind == "llmc" {
		return openLLMC(path)
	}
	m, err := hf.Open(path)
	if err != nil {
		return nil, err
	}
	if len(m.Ignored) > 0 && progress != nil {
		fmt.Fprintf(progress, "note: %s: skipping %d tensors a GPT-2 language model does not use: %s\n", m.Source, len(m.Ignored), strings.Join(m.Ignored, ", "))
	}
	return &Loaded{Config: m.Config, Source: spec, file: m.ReadParams, close: m.Close}, nil
}

// InitConfig returns the config of the model --init names, reading only headers (for a Hugging
// Face model, config.json checked against the safetensors header).
func InitConfig(ctx context.Context, spec string, progress io.Writer) (gpt.Config, error) {
	kind, path, err := resolveInit(ctx, spec, progress)
	if err != nil {
		return gpt.Config{}, err
	}
	if kind == "llmc" {
		cfg, err := gpt.InspectLLMC(path)
		return cfg, err
	}
	return hf.Inspect(path)
}

// resolveInit says what spec is ("llmc" or "hf") and where it is, downloading hf:OWNER/NAME.
func resolveInit(ctx context.Context, spec string, progress io.Writer) (kind, path string, err error) {
	if strings.HasPrefix(spec, hf.SpecPrefix) {
		dir, err := ResolveInit(ctx, spec, "", progress)
		return "hf", dir, err
	}
	st, err := os.Stat(spec)
	if err != nil {
		return "", "", fmt.Errorf("--init: %w; pass %s", err, InitHelp)
	}
	switch {
	case st.IsDir() && fileExists(filepath.Join(spec, "run.json")):
		return "", "", fmt.Errorf("--init %s is a gpt2go run; continue it with train --resume %s, or read it with --ckpt", spec, spec)
	case st.IsDir():
		return "hf", spec, nil // hf.Read names what the folder lacks
	case isLLMC(spec):
		return "llmc", spec, nil
	case hf.IsWeightsFile(spec):
		return "hf", spec, nil
	case isCheckpoint(spec):
		return "", "", fmt.Errorf("--init %s is a gpt2go checkpoint; read it with --ckpt (sample, eval; fill for a BERT run), continue its run with train --resume, or start a new GPT-2 run from it by exporting it first (export --format hf)", spec)
	case isSafetensors(spec):
		return "", "", fmt.Errorf("--init %s is a safetensors file without GPT-2's tensors (no wte.weight or transformer.wte.weight); pass %s", spec, InitHelp)
	case isPyTorchPickle(spec):
		return "", "", fmt.Errorf("--init %s is a PyTorch pickle, which gpt2go does not read; pass the model's model.safetensors (the Hub has one for every GPT-2 size), or save it with save_pretrained(dir, safe_serialization=True)", spec)
	case strings.EqualFold(filepath.Ext(spec), ".safetensors"):
		// Cut short inside its header (past it, hf.IsWeightsFile still knows the file and
		// hf.Open says what is wrong), or not safetensors at all, such as a saved error page.
		_, err := safetensors.ReadFileHeader(spec)
		return "", "", fmt.Errorf("--init %s is not a valid safetensors file: %v", spec, err)
	}
	return "", "", fmt.Errorf("--init %s is neither an llm.c model file (wrong magic %d, want %d) nor a Hugging Face GPT-2 model; pass %s", spec, readMagic(spec), gpt.LLMCMagic, InitHelp)
}

// isSafetensors reports whether path has a valid safetensors header.
func isSafetensors(path string) bool {
	_, err := safetensors.ReadFileHeader(path)
	return err == nil
}

// isPyTorchPickle recognises torch.save's files: a zip archive (PyTorch >= 1.6) or a bare pickle,
// usually named pytorch_model.bin, *.pt or *.pth.
func isPyTorchPickle(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pt", ".pth", ".ckpt":
		return true
	}
	magic := readMagic(path)
	return filepath.Base(path) == "pytorch_model.bin" || magic == 0x04034b50 || magic&0xf0ff == 0x0080 // "PK\x03\x04"; pickle PROTO 2-5
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// isCheckpoint reports whether path is a gpt2go checkpoint.
func isCheckpoint(path string) bool {
	_, err := checkpoint.LoadWeights(path)
	return err == nil
}

// isLLMC reports whether path starts with llm.c's model magic.
func isLLMC(path string) bool { return readMagic(path) == gpt.LLMCMagic }

// readMagic returns the file's first little-endian int32 (0 if it has none).
func readMagic(path string) int32 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var magic int32
	binary.Read(f, binary.LittleEndian, &magic)
	return magic
}
