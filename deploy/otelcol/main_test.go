package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/otelcol"
)

func command(args ...string) error {
	cmd := otelcol.NewCommand(otelcol.CollectorSettings{
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: resolverSettings(),
		},
	})
	cmd.SetArgs(args)
	cmd.SetOut(os.Stderr)
	return cmd.Execute()
}

// The compose stack's collector configuration is valid for this distribution: every
// component it names is built in, and its settings decode.
func TestComposeConfigValidates(t *testing.T) {
	if err := command("validate", "--config="+filepath.Join("..", "otel-collector.yaml")); err != nil {
		t.Fatal(err)
	}
}

// A configuration naming a component the distribution lacks is refused (the validation
// above can fail).
func TestUnknownComponentRefused(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte(`
receivers:
  otlp:
    protocols: {http: {endpoint: 127.0.0.1:0}}
exporters:
  prometheus: {endpoint: 127.0.0.1:0}
service:
  pipelines:
    metrics: {receivers: [otlp], exporters: [prometheus]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := command("validate", "--config="+cfg)
	if err == nil || !strings.Contains(err.Error(), "prometheus") {
		t.Fatalf("validate of a config with an unknown exporter: %v", err)
	}
}
