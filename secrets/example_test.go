package secrets_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/airlock-proxy/airlock/secrets"
)

// A credential from the proxy's environment, attached as a header and scrubbed from an
// echoing response.
func ExampleBroker_Attach() {
	os.Setenv("EXAMPLE_API_KEY", "sk-example-123456")
	defer os.Unsetenv("EXAMPLE_API_KEY")
	b, err := secrets.New(context.Background(), secrets.Options{Credentials: map[string]secrets.CredentialConfig{
		"example": {Env: "EXAMPLE_API_KEY", Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}},
	}})
	if err != nil {
		panic(err)
	}
	defer b.Close(context.Background())

	out, _ := http.NewRequest(http.MethodGet, "https://api.example.com/v1/models", nil)
	out.Header.Set("Authorization", "Bearer what-the-sandbox-sent")
	scrub, err := b.Attach(context.Background(), secrets.AttachRequest{SandboxID: "sbx-1", Names: []string{"example"}, Out: out})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Header.Get("Authorization"))

	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"you_sent":"Bearer sk-example-123456"}`))}
	scrub.ScrubResponse(resp)
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	fmt.Println(secrets.NewSecret("sk-example-123456"))
	// Output:
	// Bearer sk-example-123456
	// {"you_sent":"[airlock:redacted]"}
	// [redacted]
}
