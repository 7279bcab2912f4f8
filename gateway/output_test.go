package gateway

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/sandbox"
)

func TestMaxOutputMemoryDefault(t *testing.T) {
	// A run at the platform's largest caps reserves 6 × 16 + 4 MiB for its
	// output and 2 × 64 + 4 × 16 MiB for its artifacts: 292 MiB.
	c := Config{MaxConcurrentRuns: 3}.WithDefaults()
	if c.MaxOutputMemoryMB != 3*292 {
		t.Errorf("default for 3 run slots: %d MiB, want 876", c.MaxOutputMemoryMB)
	}
	c = Config{MaxConcurrentRuns: 64}.WithDefaults()
	if c.MaxOutputMemoryMB != DefaultMaxOutputMemoryMBCeiling {
		t.Errorf("default for 64 run slots: %d MiB, want the ceiling", c.MaxOutputMemoryMB)
	}
	if err := (Config{MaxConcurrentRuns: 1, MaxOutputMemoryMB: -1}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "max_output_memory_mb") {
		t.Errorf("a negative budget: %v", err)
	}
}

// A client that stops reading a large response loses the connection once
// the write deadline passes, so its run's output memory is given back.
func TestAClientThatStopsReadingDoesNotHoldTheResponseForever(t *testing.T) {
	oldGrace, oldRate := writeGrace, minWriteRate
	writeGrace, minWriteRate = 200*time.Millisecond, 1<<30
	t.Cleanup(func() { writeGrace, minWriteRate = oldGrace, oldRate })

	env := &Envelope{Stdout: strings.Repeat("\x01", 16<<20), Logs: []sandbox.LogLine{}}
	e, err := execution.EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	eng := gin.New()
	eng.POST("/", func(c *gin.Context) {
		defer close(done)
		writeEnvelope(c, http.StatusOK, e)
	})
	srv := httptest.NewServer(eng)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Never read: the 96 MiB body cannot fit in the socket buffers.
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler is still writing to a client that stopped reading")
	}
}
