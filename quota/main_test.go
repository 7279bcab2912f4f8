package quota

import (
	"context"
	"io"
	"log"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// discardLogger silences go-redis' pool logging: the outage tests dial a
// dead server on purpose.
type discardLogger struct{ l *log.Logger }

func (d discardLogger) Printf(_ context.Context, format string, v ...any) { d.l.Printf(format, v...) }

func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{log.New(io.Discard, "", 0)})
	os.Exit(m.Run())
}
