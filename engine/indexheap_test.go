package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// heapTestItem is an indexHeap element for the test.
type heapTestItem struct {
	key, index int
}

func (x *heapTestItem) before(o *heapTestItem) bool { return x.key < o.key }
func (x *heapTestItem) setHeapIndex(i int)          { x.index = i }

// checkHeap fails unless every element of h records its place, no parent
// comes after its child, and the slots past the end hold no element.
func checkHeap(t *testing.T, h indexHeap[*heapTestItem]) {
	t.Helper()
	for i, x := range h {
		if x.index != i {
			t.Fatalf("element at %d records index %d", i, x.index)
		}
		if i > 0 && h[(i-1)/2].key > x.key {
			t.Fatalf("parent %d (key %d) comes after child %d (key %d)", (i-1)/2, h[(i-1)/2].key, i, x.key)
		}
	}
	for i, x := range h[len(h):cap(h)] {
		if x != nil {
			t.Fatalf("slot %d past the end still holds an element (key %d): the heap keeps what left it", len(h)+i, x.key)
		}
	}
}

// TestIndexHeap: pushes, fixes after a key changed, and removals anywhere
// keep the heap ordered and each element's index true; what leaves is
// told -1 and is not kept in the slice's spare room; the elements come out
// in key order.
func TestIndexHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h indexHeap[*heapTestItem]
	in := map[*heapTestItem]bool{}
	for step := range 2000 {
		switch op := r.IntN(4); {
		case op <= 1 || len(h) == 0:
			x := &heapTestItem{key: r.IntN(100)}
			h.push(x)
			in[x] = true
		case op == 2:
			x := h[r.IntN(len(h))]
			x.key = r.IntN(100)
			h.fix(x.index)
		default:
			i := r.IntN(len(h))
			want := h[i]
			if got := h.remove(i); got != want {
				t.Fatalf("step %d: remove(%d) returned key %d, want the element at %d (key %d)", step, i, got.key, i, want.key)
			}
			if want.index != -1 {
				t.Fatalf("step %d: a removed element records index %d, want -1", step, want.index)
			}
			delete(in, want)
		}
		checkHeap(t, h)
		if len(h) != len(in) {
			t.Fatalf("step %d: %d elements, want %d", step, len(h), len(in))
		}
	}
	var keys []int
	for len(h) > 0 {
		keys = append(keys, h.remove(0).key)
		checkHeap(t, h)
	}
	if !slices.IsSorted(keys) {
		t.Errorf("removed from the top in the order %v, want ascending", keys)
	}

	for _, k := range []int{3, 1, 2} {
		h.push(&heapTestItem{key: k})
	}
	was := slices.Clone(h)
	h.reset()
	if len(h) != 0 {
		t.Fatalf("%d elements after reset", len(h))
	}
	checkHeap(t, h)
	for _, x := range was {
		if x.index != -1 {
			t.Errorf("element of key %d records index %d after reset, want -1", x.key, x.index)
		}
	}
}
