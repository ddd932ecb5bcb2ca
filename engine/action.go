package engine

import "time"

// action is how a delivery is settled once its page was processed: one
// of ackAction, giveBackAction, rejectAction, nackAction and writeAction.
// Where an action is optional (write.done), nil is an ack.
type action interface {
	// String names the outcome, for logs.
	String() string
	settles() // only the types of this file are actions
}

// ackAction acknowledges the delivery: its page is done.
type ackAction struct{}

// giveBackAction gives the delivery back unstarted, its attempt unspent
// (see republish).
type giveBackAction struct{}

// rejectAction dead-letters the delivery with reason.
type rejectAction struct{ reason string }

// nackAction puts the delivery back, to be delivered again after delay:
// a retry, its attempt spent.
type nackAction struct{ delay time.Duration }

// writeAction hands w to the writer (see submit), which acknowledges the
// delivery once w's links and items are written.
type writeAction struct{ w *write }

func (ackAction) String() string      { return "ack" }
func (giveBackAction) String() string { return "give back" }
func (rejectAction) String() string   { return "reject" }
func (nackAction) String() string     { return "nack" }
func (writeAction) String() string    { return "write, then ack" }

func (ackAction) settles()      {}
func (giveBackAction) settles() {}
func (rejectAction) settles()   {}
func (nackAction) settles()     {}
func (writeAction) settles()    {}

func ack() action                 { return ackAction{} }
func giveBack() action            { return giveBackAction{} }
func reject(reason string) action { return rejectAction{reason: reason} }
func nack(d time.Duration) action { return nackAction{delay: d} }

// written is the action of a page that yields links or items: they are
// written (with those of other pages, see writeAll), then the delivery is
// acknowledged; if they cannot be written, it is settled with failed.
func written(w *write) action {
	if len(w.links) == 0 && w.found.len() == 0 && len(w.items) == 0 {
		return ack()
	}
	return writeAction{w: w}
}

// isFinal reports whether a settles the page for good, as done or as
// failed (an ack or a reject): not a retry, a give-back or a write still
// to be made. Only a final failure is told to Config.OnFailure, or
// written as an error item.
func isFinal(a action) bool {
	switch a.(type) {
	case ackAction, rejectAction:
		return true
	}
	return false
}
