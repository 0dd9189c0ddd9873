package session_test

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"gopkg.in/yaml.v3"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/session"
)

type openAPI struct {
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas map[string]schema `yaml:"schemas"`
	} `yaml:"components"`
}

type schema struct {
	Required   []string             `yaml:"required"`
	Properties map[string]yaml.Node `yaml:"properties"`
}

type operation struct {
	Responses map[string]yaml.Node `yaml:"responses"`
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return doc
}

// documented returns the documented statuses of method on path, nil when undocumented.
func (d openAPI) documented(t *testing.T, method, path string) []int {
	ops, ok := d.Paths[path]
	if !ok {
		return nil
	}
	n, ok := ops[strings.ToLower(method)]
	if !ok {
		return nil
	}
	var op operation
	if err := n.Decode(&op); err != nil {
		t.Fatal(err)
	}
	var out []int
	for code := range op.Responses {
		c, _ := strconv.Atoi(code)
		out = append(out, c)
	}
	return out
}

// TestOpenAPIRoutes: every route the server has is documented, and every documented
// operation is served.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	m, err := session.New(session.Options{StateDir: t.TempDir(), WorkspaceRoots: []string{os.TempDir()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(t.Context()) })
	r := chi.NewRouter()
	m.Routes(r)
	served := map[string]bool{}
	_ = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+route] = true
		if doc.documented(t, method, route) == nil {
			t.Errorf("%s %s is served but not in openapi.yaml", method, route)
		}
		return nil
	})
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			if !served[strings.ToUpper(method)+" "+path] {
				t.Errorf("openapi.yaml documents %s %s, which the server does not serve", strings.ToUpper(method), path)
			}
		}
	}
}

// TestOpenAPISchemas: the JSON bodies' fields are the documented properties, and the
// required ones are always present.
func TestOpenAPISchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Spec": session.Spec{}, "Info": session.Info{}, "ExecRequest": session.ExecRequest{},
		"ExecResult": session.ExecResult{}, "Frame": session.Frame{}, "ClientMessage": session.ClientMessage{}, "Resize": session.Resize{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is not documented", name)
			continue
		}
		if name == "Frame" {
			s = frameVariant(t, doc)
		}
		typ := reflect.TypeOf(v)
		var fields []string
		for i := range typ.NumField() {
			tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if tag == "-" {
				continue
			}
			fields = append(fields, tag)
			if _, ok := s.Properties[tag]; !ok {
				t.Errorf("%s.%s is sent but not documented", name, tag)
			}
		}
		for p := range s.Properties {
			if !slices.Contains(fields, p) {
				t.Errorf("%s.%s is documented but not in the type", name, p)
			}
		}
	}
}

// checkResponse fails when the answer's status is not documented for the operation, or a
// JSON body lacks a required property of its schema.
func checkResponse(t *testing.T, doc openAPI, method, route string, code int, body []byte, schemaName string) {
	t.Helper()
	if !slices.Contains(doc.documented(t, method, route), code) {
		t.Errorf("%s %s answered %d, which openapi.yaml does not document (%s)", method, route, code, body)
	}
	if code >= 400 {
		var e map[string]any
		if json.Unmarshal(body, &e) != nil || e["error"] == nil {
			t.Errorf("%s %s %d: error body %s lacks error", method, route, code, body)
		}
		return
	}
	if schemaName == "" {
		return
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatalf("%s %s: %v: %s", method, route, err, body)
	}
	for _, req := range doc.Components.Schemas[schemaName].Required {
		if _, ok := obj[req]; !ok {
			t.Errorf("%s %s: %s lacks required %s: %s", method, route, schemaName, req, body)
		}
	}
}

// TestOpenAPIAgainstServer drives a real server through each operation and checks its
// answers against the document.
func TestOpenAPIAgainstServer(t *testing.T) {
	doc := loadOpenAPI(t)
	e := newEnv(t, nil)
	code, b := e.do(t, "POST", "/v1/sandboxes", session.Spec{Workspace: t.TempDir() + ":cow"})
	checkResponse(t, doc, "POST", "/v1/sandboxes", code, b, "Info")
	var info session.Info
	_ = json.Unmarshal(b, &info)
	id := info.ID
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id, nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}", code, b, "Info")
	code, b = e.do(t, "GET", "/v1/sandboxes/sbx-none", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}", code, b, "")
	_, _, res, code := e.exec(t, id, session.ExecRequest{Argv: []string{"true"}})
	checkResponse(t, doc, "POST", "/v1/sandboxes/{id}/exec", code, nil, "")
	rb, _ := json.Marshal(res)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/execs/{exec_id}", 200, rb, "ExecResult")
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id+"/execs/"+res.ExecID, nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/execs/{exec_id}", code, b, "ExecResult")
	code, b = e.do(t, "POST", "/v1/sandboxes/"+id+"/exec", session.ExecRequest{})
	checkResponse(t, doc, "POST", "/v1/sandboxes/{id}/exec", code, b, "")
	code, b = e.do(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/workspace/a", []byte("a"))
	checkResponse(t, doc, "PUT", "/v1/sandboxes/{id}/files", code, b, "")
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=/workspace/a", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/files", code, b, "")
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id+"/files/list?path=/workspace", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/files/list", code, b, "")
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id+"/changes", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/changes", code, b, "")
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id+"/patch", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/patch", code, b, "")
	code, b = e.do(t, "GET", "/v1/sandboxes/"+id+"/report", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes/{id}/report", code, b, "Report")
	code, b = e.do(t, "GET", "/v1/sandboxes", nil)
	checkResponse(t, doc, "GET", "/v1/sandboxes", code, b, "")
	code, b = e.do(t, "DELETE", "/v1/sandboxes/"+id, nil)
	checkResponse(t, doc, "DELETE", "/v1/sandboxes/{id}", code, b, "Report")
	var rep sandbox.Report
	_ = json.Unmarshal(b, &rep)
	_, body, _, code := e.exec(t, id, session.ExecRequest{Argv: []string{"true"}})
	checkResponse(t, doc, "POST", "/v1/sandboxes/{id}/exec", code, []byte(body), "")
}

// frameVariant is the first (non-result) form of the documented Frame.
func frameVariant(t *testing.T, doc openAPI) schema {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Components struct {
			Schemas struct {
				Frame struct {
					OneOf []schema `yaml:"oneOf"`
				} `yaml:"Frame"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &raw); err != nil || len(raw.Components.Schemas.Frame.OneOf) == 0 {
		t.Fatalf("Frame: want oneOf: %v", err)
	}
	return raw.Components.Schemas.Frame.OneOf[0]
}

// TestFrameJSON: the last frame carries the result's fields flat, and reads back.
func TestFrameJSON(t *testing.T) {
	b, err := json.Marshal(session.Frame{Result: &session.ExecResult{ExecID: "exec-1", ExitCode: 0, TimedOut: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"exec_id":"exec-1"`, `"exit_code":0`, `"timed_out":true`, `"duration_ms":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var f session.Frame
	if err := json.Unmarshal(b, &f); err != nil || f.Result == nil || !f.Result.TimedOut || f.ExecID != "exec-1" {
		t.Errorf("read back: %+v %v", f, err)
	}
	b, _ = json.Marshal(session.Frame{Stream: "stdout", Data: []byte("hi")})
	if err := json.Unmarshal(b, &f); err != nil || f.Result != nil || string(f.Data) != "hi" {
		t.Errorf("output frame %s: %+v %v", b, f, err)
	}
}
