// Command airlock-otelcol is the OpenTelemetry Collector of the compose stack: a small
// distribution built here from the collector's Go modules (no image can be pulled). It has
// what deploy/otel-collector.yaml uses and a little more: the OTLP receiver, the batch and
// memory_limiter processors, and the otlp (gRPC), otlphttp and debug exporters. Its own
// metrics are served for Prometheus by the service's telemetry settings.
//
// deploy/build-companions.sh builds it (static, CGO_ENABLED=0) into airlock/otelcol:local.
package main

import (
	"fmt"
	"os"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// version is the collector release whose modules this is built from (go.mod); the build
// script sets it from there.
var version = "dev"

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "airlock-otelcol",
			Description: "OpenTelemetry Collector for airlock's compose stack",
			Version:     version,
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: resolverSettings(),
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-otelcol:", err)
		os.Exit(1)
	}
}

// resolverSettings: configuration from files (--config=FILE or file:FILE), yaml:
// snippets, and ${env:NAME} (also as ${NAME}).
func resolverSettings() confmap.ResolverSettings {
	return confmap.ResolverSettings{
		ProviderFactories: []confmap.ProviderFactory{
			fileprovider.NewFactory(),
			envprovider.NewFactory(),
			yamlprovider.NewFactory(),
		},
		DefaultScheme: "env",
	}
}

// components lists the factories of every component the distribution has.
func components() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap(otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Processors, err = otelcol.MakeFactoryMap(batchprocessor.NewFactory(), memorylimiterprocessor.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap(otlpexporter.NewFactory(), otlphttpexporter.NewFactory(), debugexporter.NewFactory()); err != nil {
		return f, err
	}
	f.Telemetry = otelconftelemetry.NewFactory()
	return f, nil
}
