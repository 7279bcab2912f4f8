// Package audit writes exactly one durable record per authenticated execute
// request (run, refused by policy, refused by quota) before the response is sent.
package audit

// Config is the audit section of the config file.
type Config struct {
	// File is the JSON-lines audit log. Default <state_dir>/audit.jsonl.
	File string `yaml:"file" json:"file"`
	// Sinks lists where records go: "file" (default), "stdout", "otlp".
	Sinks []string `yaml:"sinks" json:"sinks"`
	// MaxSizeMB rotates the file at this size. Default 100.
	MaxSizeMB int `yaml:"max_size_mb" json:"max_size_mb"`
	// MaxBackups keeps this many rotated files. Default 10.
	MaxBackups int `yaml:"max_backups" json:"max_backups"`
}
