package simulate

import "container/heap"

// orderedHeap is a min-heap of T by less: the scheduler's queues and the
// source's merge of pending events. It is container/heap's algorithm, so
// the order of equal elements is the one the typed heaps it replaced gave.
type orderedHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func newHeap[T any](less func(a, b T) bool) *orderedHeap[T] {
	return &orderedHeap[T]{less: less}
}

func (h *orderedHeap[T]) Len() int           { return len(h.items) }
func (h *orderedHeap[T]) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *orderedHeap[T]) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *orderedHeap[T]) Push(x any)         { h.items = append(h.items, x.(T)) }
func (h *orderedHeap[T]) Pop() any {
	var zero T
	x := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = zero // no reference kept to what left
	h.items = h.items[:len(h.items)-1]
	return x
}

// peek is the least element; the heap must not be empty.
func (h *orderedHeap[T]) peek() T { return h.items[0] }

// push adds x; pop removes and returns the least element.
func (h *orderedHeap[T]) push(x T) { heap.Push(h, x) }
func (h *orderedHeap[T]) pop() T   { return heap.Pop(h).(T) }

// fix restores the order after the least element changed.
func (h *orderedHeap[T]) fix() { heap.Fix(h, 0) }
