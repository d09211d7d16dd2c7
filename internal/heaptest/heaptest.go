// Package heaptest measures the live heap for the tests that bound what
// respmeter keeps in memory (metrics' scrapes, cmd/respmeter's HDR log).
package heaptest

import "runtime"

// Live returns the bytes of live heap objects after a full collection
// (runtime.MemStats.HeapAlloc right after runtime.GC).
func Live() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
