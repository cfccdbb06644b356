package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Driver is the CUDA driver API (libcuda.so.1), loaded with purego. Every call goes through
// purego.SyscallN with the function pointers resolved once.
type Driver struct {
	Path    string
	Version int // e.g. 13000 for CUDA 13.0

	init, driverGetVersion, deviceGetCount, deviceGet, deviceGetName, deviceGetAttribute, deviceTotalMem,
	primaryCtxRetain, ctxSetCurrent, ctxGetCurrent, ctxSynchronize, memGetInfo, memAlloc, memFree,
	memcpyHtoD, memcpyDtoH, memcpyHtoDAsync, memcpyDtoHAsync, memcpyDtoDAsync, memsetD32Async, memsetD16Async,
	moduleLoadData, moduleGetFunction, funcSetAttribute, launchKernel, streamCreate, streamSynchronize, streamWaitEvent,
	eventCreate, eventRecord, eventSynchronize, eventQuery, eventElapsedTime, memAllocHost, getErrorName, getErrorString uintptr

	handle    uintptr   // libcuda's, from dlopen
	graphOnce sync.Once // graph.go: the graph calls, loaded on first use
	graphSyms *graphSymbols
	graphErr  error
}

var (
	driverOnce sync.Once
	driverLib  *Driver
	driverErr  error
)

// LoadDriver opens libcuda once per process and calls cuInit.
func LoadDriver() (*Driver, error) {
	driverOnce.Do(func() { driverLib, driverErr = loadDriver() })
	return driverLib, driverErr
}

func loadDriver() (*Driver, error) {
	h, path, err := libCUDA.open()
	if err != nil {
		return nil, err
	}
	d := &Driver{Path: path, handle: h}
	err = symbols(libCUDA, h, map[string]*uintptr{
		"cuInit":                   &d.init,
		"cuDriverGetVersion":       &d.driverGetVersion,
		"cuDeviceGetCount":         &d.deviceGetCount,
		"cuDeviceGet":              &d.deviceGet,
		"cuDeviceGetName":          &d.deviceGetName,
		"cuDeviceGetAttribute":     &d.deviceGetAttribute,
		"cuDeviceTotalMem_v2":      &d.deviceTotalMem,
		"cuDevicePrimaryCtxRetain": &d.primaryCtxRetain,
		"cuCtxSetCurrent":          &d.ctxSetCurrent,
		"cuCtxGetCurrent":          &d.ctxGetCurrent,
		"cuCtxSynchronize":         &d.ctxSynchronize,
		"cuMemGetInfo_v2":          &d.memGetInfo,
		"cuMemAlloc_v2":            &d.memAlloc,
		"cuMemFree_v2":             &d.memFree,
		"cuMemcpyHtoD_v2":          &d.memcpyHtoD,
		"cuMemcpyDtoH_v2":          &d.memcpyDtoH,
		"cuMemcpyHtoDAsync_v2":     &d.memcpyHtoDAsync,
		"cuMemcpyDtoHAsync_v2":     &d.memcpyDtoHAsync,
		"cuMemcpyDtoDAsync_v2":     &d.memcpyDtoDAsync,
		"cuMemsetD32Async":         &d.memsetD32Async,
		"cuMemsetD16Async":         &d.memsetD16Async,
		"cuModuleLoadData":         &d.moduleLoadData,
		"cuModuleGetFunction":      &d.moduleGetFunction,
		"cuFuncSetAttribute":       &d.funcSetAttribute,
		"cuLaunchKernel":           &d.launchKernel,
		"cuStreamCreate":           &d.streamCreate,
		"cuStreamSynchronize":      &d.streamSynchronize,
		"cuStreamWaitEvent":        &d.streamWaitEvent,
		"cuEventCreate":            &d.eventCreate,
		"cuEventRecord":            &d.eventRecord,
		"cuEventSynchronize":       &d.eventSynchronize,
		"cuEventQuery":             &d.eventQuery,
		"cuMemAllocHost_v2":        &d.memAllocHost,
		"cuEventElapsedTime":       &d.eventElapsedTime,
		"cuGetErrorName":           &d.getErrorName,
		"cuGetErrorString":         &d.getErrorString,
	})
	if err != nil {
		return nil, err
	}
	if err := d.check("cuInit", first(purego.SyscallN(d.init, 0))); err != nil {
		return nil, fmt.Errorf("%w (is an NVIDIA GPU present and the driver loaded? nvidia-smi should list it)", err)
	}
	var v int32
	if err := d.check("cuDriverGetVersion", first(purego.SyscallN(d.driverGetVersion, uintptr(unsafe.Pointer(&v))))); err != nil {
		return nil, err
	}
	d.Version = int(v)
	return d, nil
}

// Error is a failed driver call: the call, the CUresult name (CUDA_ERROR_OUT_OF_MEMORY) and text.
type Error struct {
	Call, Name, Text string
	Code             int
}

func (e *Error) Error() string { return fmt.Sprintf("%s failed: %s (%s)", e.Call, e.Name, e.Text) }

// check turns a nonzero CUresult of call into an *Error.
func (d *Driver) check(call string, code uintptr) error {
	if code == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(code), Name: fmt.Sprintf("CUresult %d", code), Text: "unknown error"}
	var s uintptr
	if r, _, _ := purego.SyscallN(d.getErrorName, code, uintptr(unsafe.Pointer(&s))); r == 0 && s != 0 {
		e.Name = goString(s)
	}
	if r, _, _ := purego.SyscallN(d.getErrorString, code, uintptr(unsafe.Pointer(&s))); r == 0 && s != 0 {
		e.Text = goString(s)
	}
	return e
}

// Device attributes used here (CUdevice_attribute values).
const (
	attrMultiprocessorCount  = 16
	attrComputeCapabilityMaj = 75
	attrComputeCapabilityMin = 76
	attrMaxSharedPerBlockOpt = 97
)

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Ordinal      int
	Name         string
	Major, Minor int // compute capability
	SMs          int
	TotalMem     int64
	MaxSharedOpt int // bytes of shared memory a block may opt in to
}

// Arch is the NVRTC target for the device, e.g. "sm_90".
func (i DeviceInfo) Arch() string { return fmt.Sprintf("sm_%d%d", i.Major, i.Minor) }

// VisibleDevices loads the driver and returns how many GPUs it sees (those CUDA_VISIBLE_DEVICES
// lets through).
func VisibleDevices() (int, error) {
	drv, err := LoadDriver()
	if err != nil {
		return 0, err
	}
	return drv.DeviceCount()
}

// DeviceCount returns the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	err := d.check("cuDeviceGetCount", first(purego.SyscallN(d.deviceGetCount, uintptr(unsafe.Pointer(&n)))))
	return int(n), err
}

// Device describes device ordinal.
func (d *Driver) Device(ordinal int) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: ordinal}
	var dev int32
	if err := d.check("cuDeviceGet", first(purego.SyscallN(d.deviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)))); err != nil {
		return info, err
	}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", first(purego.SyscallN(d.deviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev)))); err != nil {
		return info, err
	}
	info.Name = goString(uintptr(unsafe.Pointer(&name[0])))
	runtime.KeepAlive(name)
	for attr, dst := range map[int]*int{attrComputeCapabilityMaj: &info.Major, attrComputeCapabilityMin: &info.Minor,
		attrMultiprocessorCount: &info.SMs, attrMaxSharedPerBlockOpt: &info.MaxSharedOpt} {
		var v int32
		if err := d.check("cuDeviceGetAttribute", first(purego.SyscallN(d.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev)))); err != nil {
			return info, err
		}
		*dst = int(v)
	}
	var total uintptr
	if err := d.check("cuDeviceTotalMem", first(purego.SyscallN(d.deviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev)))); err != nil {
		return info, err
	}
	info.TotalMem = int64(total)
	return info, nil
}
