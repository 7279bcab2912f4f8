package app_test

import (
	"os"
	"testing"

	"github.com/execgate/execgate/toolbridge/toolbridgetest"
)

func TestMain(m *testing.M) {
	toolbridgetest.ServeIfChild() // the MCP server of toolbridgetest.StartProcess
	os.Exit(m.Run())
}
