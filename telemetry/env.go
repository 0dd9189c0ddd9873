package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

const (
	protoHTTP = "http/protobuf"
	protoGRPC = "grpc"
)

// wantOTLP decides from OTEL_<SIGNAL>_EXPORTER whether a signal goes out over OTLP. Unset
// means "only when an endpoint is configured", so that nothing is exported by default.
func wantOTLP(signal string) (bool, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	name := "OTEL_" + signal + "_EXPORTER"
	sel := strings.TrimSpace(os.Getenv(name))
	if sel == "" {
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
			os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != "", nil
	}
	otlp := false
	for v := range strings.SplitSeq(sel, ",") {
		switch strings.TrimSpace(v) {
		case "otlp":
			otlp = true
		case "none":
		case "prometheus":
			if signal != "METRICS" {
				return false, fmt.Errorf("telemetry: %s=%q: prometheus is for metrics only", name, sel)
			}
		default:
			return false, fmt.Errorf("telemetry: %s=%q: airlock supports otlp or none", name, sel)
		}
	}
	return otlp, nil
}

func otlpProtocol(signal string) (string, error) {
	p := os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", protoHTTP:
		return protoHTTP, nil
	case protoGRPC:
		return protoGRPC, nil
	}
	return "", fmt.Errorf("telemetry: OTLP protocol %q: want http/protobuf or grpc", p)
}

func spanExporter(ctx context.Context) (sdktrace.SpanExporter, string, error) {
	ok, err := wantOTLP("TRACES")
	if err != nil || !ok {
		return nil, "", err
	}
	proto, err := otlpProtocol("TRACES")
	if err != nil {
		return nil, "", err
	}
	var exp sdktrace.SpanExporter
	if proto == protoGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, "", fmt.Errorf("telemetry: OTLP trace exporter (%s): %w", proto, err)
	}
	return exp, proto, nil
}

func metricReader(ctx context.Context) (sdkmetric.Reader, string, error) {
	ok, err := wantOTLP("METRICS")
	if err != nil || !ok {
		return nil, "", err
	}
	proto, err := otlpProtocol("METRICS")
	if err != nil {
		return nil, "", err
	}
	var exp sdkmetric.Exporter
	if proto == protoGRPC {
		exp, err = otlpmetricgrpc.New(ctx)
	} else {
		exp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		return nil, "", fmt.Errorf("telemetry: OTLP metric exporter (%s): %w", proto, err)
	}
	return sdkmetric.NewPeriodicReader(exp), proto, nil
}

// CheckEnv checks the OTEL_* variables Setup reads to choose its exporters, without
// making any: its error is the one Setup would return for them. `airlock proxy --check`
// runs it.
func CheckEnv() error {
	for _, signal := range []string{"TRACES", "METRICS"} {
		ok, err := wantOTLP(signal)
		if err != nil {
			return err
		}
		if ok {
			if _, err := otlpProtocol(signal); err != nil {
				return err
			}
		}
	}
	return nil
}
