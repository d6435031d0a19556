//go:build !unix

package replay

// mapZeroed returns n zeroed bytes from the heap: this system has no
// anonymous mappings through package syscall.
func mapZeroed(n int) []byte { return make([]byte, n) }

func unmap([]byte) {}
