package redact_test

import (
	"fmt"

	"github.com/airlock-proxy/airlock/internal/redact"
)

func ExampleQuery() {
	fmt.Println(redact.Query("state=open&access_token=ghp_x&debug"))
	// Output: state=[redacted]&access_token=[redacted]&[redacted]
}
