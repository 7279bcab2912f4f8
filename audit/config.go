// Package audit writes exactly one durable record per authenticated execute
// request (run, refused by policy, refused by quota) before the response is sent.
//
// A Log fans each Record out to its sinks: a JSON-lines file (fsynced before
// Record returns, rotated by size, locked against a second writer), stdout,
// and OTLP logs. The record's JSON Schema is audit/schema/record.v1.json
// (embedded, see Schema); audit/audittest validates records against it.
package audit

// Config is the audit section of the config file.
type Config struct {
	// File is the JSON-lines audit log. Default <state_dir>/audit.jsonl.
	// Rotated files sit beside it as audit-<UTC time>.jsonl; audit.jsonl.lock
	// keeps a second process from writing to it.
	File string `yaml:"file" json:"file"`
	// Sinks lists where records go: "file" (default), "stdout", "otlp"
	// (OTLP/HTTP logs, configured by the standard OTEL_EXPORTER_OTLP_* variables).
	Sinks []string `yaml:"sinks" json:"sinks"`
	// MaxSizeMB rotates the file when a record would take it past this size,
	// in MiB. Zero means the default, 100.
	MaxSizeMB int `yaml:"max_size_mb" json:"max_size_mb"`
	// MaxBackups keeps this many rotated files, deleting the oldest. Zero
	// means the default, 10; negative keeps every rotated file.
	MaxBackups int `yaml:"max_backups" json:"max_backups"`
}
