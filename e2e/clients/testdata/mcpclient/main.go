// mcpclient is an MCP client built with the official Go SDK, run inside a sandbox by the
// e2e suite: it reaches its server only through airlock (HTTPS_PROXY, airlock's CA in
// SSL_CERT_FILE). Each step prints one line: "name ok RESULT" or "name error ERR".
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "sandboxed-agent", Version: "1.0.0"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: os.Args[1], MaxRetries: -1}, nil)
	if err != nil {
		fmt.Println("connect error", err)
		os.Exit(2)
	}
	defer sess.Close()
	fmt.Println("connect ok")
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		fmt.Println("list error", err)
	} else {
		fmt.Println("list ok", len(tools.Tools))
	}
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"get_issue", map[string]any{"id": 7}},
		{"update_issue", map[string]any{"id": 12, "state": "closed"}},
		{"drop_database", map[string]any{"id": 1}},
	} {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
		switch {
		case err != nil:
			fmt.Println(call.tool, "error", err)
		case res.IsError:
			fmt.Println(call.tool, "error tool failed")
		default:
			fmt.Println(call.tool, "ok", res.Content[0].(*mcp.TextContent).Text)
		}
	}
}
