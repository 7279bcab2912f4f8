package async_test

import (
	"context"
	"strings"
	"testing"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
)

type panickingFlow struct{}

func (panickingFlow) Run(context.Context, execution.Call) *execution.Outcome {
	panic("a bug in the flow")
}

// A bug in the flow ends the async execution Internal (and its stream),
// not the process.
func TestAPanicInAnAsyncRunEndsItInternal(t *testing.T) {
	st := async.NewMemoryStore(async.Limits{}, nil)
	r := async.NewRuns(panickingFlow{}, st, async.Config{}, nil)
	k := async.Key{TenantID: "t", ExecutionID: "x"}
	if err := r.Submit(context.Background(), k, execution.Call{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, ok, _ := st.Get(context.Background(), k)
	if !ok || rec.State != async.StateDone || rec.HTTPStatus != 500 || !strings.Contains(string(rec.Envelope), `"type":"Internal"`) {
		t.Fatalf("record = %+v %s", rec, rec.Envelope)
	}
	if _, live := r.Watch(k); live {
		t.Fatal("the stream of the crashed run is still live")
	}
}
