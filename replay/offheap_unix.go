//go:build unix

package replay

import "syscall"

// mapZeroed returns n zeroed bytes from an anonymous private mapping:
// outside the Go heap, and resident only once written. Where the system
// refuses the mapping, the heap serves.
func mapZeroed(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n)
	}
	return b
}

// unmap releases what mapZeroed returned; a slice the heap served is left
// to the collector.
func unmap(b []byte) {
	// Munmap refuses (EINVAL) a slice that syscall.Mmap did not return.
	_ = syscall.Munmap(b)
}
