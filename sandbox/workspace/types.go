package workspace

// File is one input file: Path (CheckPath) relative to /workspace and its
// bytes.
type File struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
}

// Artifact is one file collected from /workspace/out.
type Artifact struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	MIME   string `json:"mime"`
	SHA256 string `json:"sha256"` // hex
	// Data is the file's bytes (Bytes of them).
	Data []byte `json:"data"`
}

// Dropped is a file of /workspace/out that was not collected, and why.
// Name is as the directory held it, clipped to MaxNameBytes (it may be
// invalid: the reason says so).
type Dropped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Bounds are what Collect may take: at most Artifacts files and Bytes
// bytes in all (the run's limits.artifacts and limits.artifacts_bytes).
// MIMEs are the media types the tool gave explicitly (by name; checked
// with CheckMIME, others are ignored).
type Bounds struct {
	Artifacts int64
	Bytes     int64
	MIMEs     map[string]string
}

// Collected is what Collect found: the artifacts in name order, the first
// MaxDropped of what it dropped, and how many it dropped in all.
type Collected struct {
	Artifacts    []Artifact
	Dropped      []Dropped
	DroppedCount int
}

// MaxDropped bounds the dropped files a Collected lists (it counts the
// rest).
const MaxDropped = 32

// Reasons a file of /workspace/out is dropped.
const (
	ReasonSymlink    = "a symbolic link (never followed)"
	ReasonDirectory  = "a directory (artifacts are the files directly in /workspace/out)"
	ReasonFIFO       = "a FIFO, not a regular file"
	ReasonSocket     = "a socket, not a regular file"
	ReasonDevice     = "a device, not a regular file"
	ReasonOther      = "not a regular file"
	ReasonCount      = "over limits.artifacts"
	ReasonBytes      = "over limits.artifacts_bytes"
	ReasonUnreadable = "could not be read"
	ReasonTooMany    = "/workspace/out holds more entries than are looked at"
	ReasonNotStopped = "the run's processes could not be stopped before collection"
)

// drop adds one dropped file to c.
func (c *Collected) drop(name, reason string) {
	c.DroppedCount++
	if len(c.Dropped) < MaxDropped {
		if len(name) > MaxNameBytes {
			name = name[:MaxNameBytes]
		}
		c.Dropped = append(c.Dropped, Dropped{Name: name, Reason: reason})
	}
}

// NotCollected is what a run that could not be collected reports.
func NotCollected(reason string) Collected {
	var c Collected
	c.drop("*", reason)
	return c
}
