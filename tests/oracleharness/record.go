package oracleharness

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"kubevirt.io/client-go/log"
)

// Action is one API call, as ../shared/oracle-vm/README.txt describes them.
type Action struct {
	Client      string          `json:"client"`
	Verb        string          `json:"verb"`
	Resource    string          `json:"resource"`
	Subresource string          `json:"subresource,omitempty"`
	Namespace   string          `json:"namespace,omitempty"`
	Name        string          `json:"name,omitempty"`
	PatchType   string          `json:"patchType,omitempty"`
	Patch       json.RawMessage `json:"patch,omitempty"`
	Object      json.RawMessage `json:"object,omitempty"`
	Preconds    json.RawMessage `json:"preconditions,omitempty"`
}

// Event is one event the controller recorded.
type Event struct {
	Object  string `json:"object"`
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// QueueOp is one thing the controller asked of its queue.
type QueueOp struct {
	Op           string `json:"op"`
	Key          string `json:"key"`
	DelaySeconds *int64 `json:"delaySeconds,omitempty"`
	Priority     *int   `json:"priority,omitempty"`
}

// Outcome is what one scenario's Execute did.
type Outcome struct {
	Name    string    `json:"name"`
	Key     string    `json:"key"`
	Actions []Action  `json:"actions"`
	Events  []Event   `json:"events"`
	Queue   []QueueOp `json:"queue"`
}

// Failer stands in for gomock's test reporter: a client call the mock does not expect ends the
// harness (the controller reached an API the harness does not wire).
type Failer struct{}

// Errorf ends the harness.
func (Failer) Errorf(format string, args ...any) { Die(format, args...) }

// Fatalf ends the harness.
func (Failer) Fatalf(format string, args ...any) { Die(format, args...) }

// Recorder is the controller's event recorder: every event with the object it is about.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

func objectName(o runtime.Object) string {
	kind := reflect.TypeOf(o).String()
	if t := reflect.TypeOf(o); t.Kind() == reflect.Pointer {
		kind = t.Elem().Name()
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return kind
	}
	return fmt.Sprintf("%s %s/%s", kind, m.GetNamespace(), m.GetName())
}

// Event records an event.
func (r *Recorder) Event(o runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{Object: objectName(o), Type: eventtype, Reason: reason, Message: message})
}

// Eventf records an event with a formatted message.
func (r *Recorder) Eventf(o runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(o, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf records an event with a formatted message (the annotations are not compared).
func (r *Recorder) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Eventf(o, eventtype, reason, messageFmt, args...)
}

// QueueLog records what the controller asks of its queue. A harness's queue type embeds a
// *QueueLog next to a struct holding the controller's real queue: QueueLog's methods are the
// shallower ones, so they win, and the real queue serves the rest (the Get of the key under
// reconcile, added before the Execute).
type QueueLog struct {
	mu  sync.Mutex
	ops []QueueOp
}

// Record appends an operation.
func (q *QueueLog) Record(op QueueOp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops = append(q.ops, op)
}

// Add records an Add.
func (q *QueueLog) Add(k string) { q.Record(QueueOp{Op: "Add", Key: k}) }

// AddAfter records an AddAfter with its delay in whole seconds.
func (q *QueueLog) AddAfter(k string, d time.Duration) {
	secs := int64(d / time.Second)
	q.Record(QueueOp{Op: "AddAfter", Key: k, DelaySeconds: &secs})
}

// AddRateLimited records an AddRateLimited.
func (q *QueueLog) AddRateLimited(k string) { q.Record(QueueOp{Op: "AddRateLimited", Key: k}) }

// Forget records a Forget.
func (q *QueueLog) Forget(k string) { q.Record(QueueOp{Op: "Forget", Key: k}) }

// Harness is one scenario's controller, ready for its Execute: what it records and how to run it.
type Harness struct {
	Name string
	// Key is the queue key under reconcile.
	Key string
	// Run is the controller's Execute.
	Run    func()
	Events *Recorder
	Queue  *QueueLog

	mu      sync.Mutex
	actions []Action
}

// New returns the Harness of scenario name, recording nothing yet, with KubeVirt's logging
// silenced.
func New(name string) *Harness {
	log.Log.SetIOWriter(io.Discard)
	return &Harness{Name: name, Events: &Recorder{}, Queue: &QueueLog{}}
}

// UpdateHook lets a harness serve an update itself, on the fake clientset's tracker (as a real
// API server would where the fake tracker does not); handled false leaves the update to the
// fake clientset.
type UpdateHook func(tracker k8stesting.ObjectTracker, x k8stesting.UpdateActionImpl) (handled bool, obj runtime.Object, err error)

// Reactor records every call a fake clientset receives, in order across the clientsets, and
// names a generateName object (a pod, a backend-storage claim) as the oracle's fake API server
// does (suffix 00000). update, when
// set, may serve an update itself on tracker (recorded all the same).
func (h *Harness) Reactor(client string, tracker k8stesting.ObjectTracker, update UpdateHook) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		act := Action{Client: client, Verb: a.GetVerb(), Resource: a.GetResource().Resource,
			Subresource: a.GetSubresource(), Namespace: a.GetNamespace()}
		switch x := a.(type) {
		case k8stesting.CreateActionImpl:
			if m, err := meta.Accessor(x.GetObject()); err == nil && m.GetName() == "" && m.GetGenerateName() != "" {
				m.SetName(m.GetGenerateName() + "00000")
			}
			act.Object, _ = json.Marshal(x.GetObject())
			if m, err := meta.Accessor(x.GetObject()); err == nil {
				act.Name = m.GetName()
			}
		case k8stesting.UpdateActionImpl:
			act.Object, _ = json.Marshal(x.GetObject())
			if m, err := meta.Accessor(x.GetObject()); err == nil {
				act.Name = m.GetName()
			}
			if update != nil {
				if handled, obj, err := update(tracker, x); handled {
					h.record(act)
					return true, obj, err
				}
			}
		case k8stesting.PatchActionImpl:
			act.Name, act.PatchType, act.Patch = x.GetName(), string(x.GetPatchType()), x.GetPatch()
		case k8stesting.DeleteActionImpl:
			act.Name = x.GetName()
			if p := x.GetDeleteOptions().Preconditions; p != nil {
				act.Preconds, _ = json.Marshal(p)
			}
		case k8stesting.GetActionImpl:
			act.Name = x.GetName()
		}
		h.record(act)
		return false, nil, nil
	}
}

func (h *Harness) record(a Action) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.actions = append(h.actions, a)
}

// execute runs the controller's Execute, ending the harness when it does not return.
func (h *Harness) execute() {
	done := make(chan struct{})
	go func() {
		h.Run()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		fmt.Fprintf(os.Stderr, "%s: %s: Execute did not return\n", program, h.Name)
		os.Exit(1)
	}
}

func (h *Harness) outcome() Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Queue.mu.Lock()
	defer h.Queue.mu.Unlock()
	h.Events.mu.Lock()
	defer h.Events.mu.Unlock()
	o := Outcome{Name: h.Name, Key: h.Key, Actions: h.actions, Events: h.Events.events, Queue: h.Queue.ops}
	if o.Actions == nil {
		o.Actions = []Action{}
	}
	if o.Events == nil {
		o.Events = []Event{}
	}
	if o.Queue == nil {
		o.Queue = []QueueOp{}
	}
	return o
}
