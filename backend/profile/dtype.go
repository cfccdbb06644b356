package profile

import "github.com/gpt2go/gpt2go/backend"

// AllocDType passes straight through: allocation is not timed (like Alloc).
func (p *Backend) AllocDType(n int, dt backend.DType) backend.Buf { return p.Backend.AllocDType(n, dt) }

// CheckDType passes straight through: the wrapped backend decides which formats it stores.
func (p *Backend) CheckDType(dt backend.DType) error { return p.Backend.CheckDType(dt) }
