// Package header parses and checks the request headers trawl sends: a
// header line as the trawl command's --header takes it, and a name and
// value the engine accepts on a request or a start URL.
package header

import (
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Parse parses a header line "Name: value". The name must be a valid
// header field name and the value must not contain a line break (see
// Check). It returns the name in canonical form.
func Parse(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" {
		return "", "", fmt.Errorf("header %q: want \"Name: value\"", line)
	}
	if err := Check(name, value); err != nil {
		return "", "", err
	}
	return http.CanonicalHeaderKey(name), value, nil
}

// Check validates a header's name and value: a valid field name, not
// Accept-Encoding (the fetcher asks for gzip and decodes it itself), and a
// value without control characters or line breaks.
func Check(name, value string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("header name %q: not a valid header field name", name)
	}
	if http.CanonicalHeaderKey(name) == "Accept-Encoding" {
		return fmt.Errorf("header %s: the fetcher asks for gzip itself and decodes it; a value set here would reach the parser undecoded", name)
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return fmt.Errorf("header %s: the value has a control character or line break", name)
	}
	return nil
}
