package engine

import "container/heap"

// heapElem is what an indexHeap holds: a pointer that orders itself
// against another and keeps its place in the heap.
type heapElem[T any] interface {
	// before reports whether the element leaves the heap before o.
	before(o T) bool
	// setHeapIndex records the element's place in the heap (-1: not in
	// it).
	setHeapIndex(i int)
}

// indexHeap is a binary min-heap, by before, whose elements know their
// place in it, so that one can be fixed or removed where it is (the
// hosts of hostTally and of the workbench). It is read as a slice: h[0]
// comes first. An element that leaves it is told index -1, and its slot
// is cleared, so the heap keeps no pointer to it. The zero value is empty
// and ready.
type indexHeap[T heapElem[T]] []T

// push adds x.
func (h *indexHeap[T]) push(x T) { heap.Push((*heapOrder[T])(h), x) }

// fix restores the order after the element at i changed its key.
func (h *indexHeap[T]) fix(i int) { heap.Fix((*heapOrder[T])(h), i) }

// remove removes and returns the element at i.
func (h *indexHeap[T]) remove(i int) T { return heap.Remove((*heapOrder[T])(h), i).(T) }

// reset removes every element.
func (h *indexHeap[T]) reset() {
	for _, x := range *h {
		x.setHeapIndex(-1)
	}
	clear(*h)
	*h = (*h)[:0]
}

// heapOrder is an indexHeap as container/heap sees it.
type heapOrder[T heapElem[T]] []T

func (o heapOrder[T]) Len() int           { return len(o) }
func (o heapOrder[T]) Less(i, j int) bool { return o[i].before(o[j]) }
func (o heapOrder[T]) Swap(i, j int) {
	o[i], o[j] = o[j], o[i]
	o[i].setHeapIndex(i)
	o[j].setHeapIndex(j)
}

func (o *heapOrder[T]) Push(x any) {
	e := x.(T)
	e.setHeapIndex(len(*o))
	*o = append(*o, e)
}

func (o *heapOrder[T]) Pop() any {
	old := *o
	n := len(old) - 1
	e := old[n]
	var zero T
	old[n] = zero
	e.setHeapIndex(-1)
	*o = old[:n]
	return e
}
