package agtp_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/agtpsuite/agtp/services/agtp"
)

// An agent writes a request; the server reads it, answers, and the agent
// reads the answer. In real use the buffer is a TLS connection made with
// ClientTLSConfig and ServerTLSConfig.
func Example() {
	var conn bytes.Buffer

	// Agent side.
	req, _ := agtp.NewRequest(agtp.MethodQuery, "/documents?lang=en")
	req.Header.Set(agtp.HeaderAgentID, strings.Repeat("7f3a9c2d", 8))
	req.Header.Set(agtp.HeaderTaskID, "task-0042")
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = []byte(`{"parameters":{"intent":"find the Q3 report"}}`)
	w := bufio.NewWriter(&conn)
	req.Write(w)
	w.Flush()

	// Server side: one iteration of the per-connection loop.
	br := bufio.NewReader(&conn)
	in, err := agtp.ReadRequest(br, agtp.DefaultLimits())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(in.Method, in.Path, in.RawQuery, in.Header.Get("task-id"))
	resp := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, []byte(`{"status":200,"task_id":"task-0042"}`))
	resp.Header.Set(agtp.HeaderTaskID, in.Header.Get(agtp.HeaderTaskID))
	resp.Write(w)
	w.Flush()

	// Agent side again.
	out, _ := agtp.ReadResponse(br, agtp.Limits{})
	fmt.Println(out.Status, out.StatusText, string(out.Body))
	// Output:
	// QUERY /documents lang=en task-0042
	// 200 OK {"status":200,"task_id":"task-0042"}
}

// A server answers wire violations with the status and reason the
// ProtocolError carries, and closes only when the stream lost framing.
func ExampleProtocolError() {
	br := bufio.NewReader(strings.NewReader("AGTP/1.0 query /a\r\nTask-ID: t-1\r\n\r\n"))
	req, err := agtp.ReadRequest(br, agtp.Limits{})
	var pe *agtp.ProtocolError
	if errors.As(err, &pe) {
		body := agtp.ErrorBody{Status: pe.Status, Reason: pe.Reason, Explanation: pe.Explanation,
			TaskID: req.Header.Get(agtp.HeaderTaskID)}
		resp, _ := body.Response()
		fmt.Println(resp.Status, pe.CloseConnection)
		fmt.Println(string(resp.Body))
	}
	// Output:
	// 459 false
	// {"status":459,"reason":"method-invalid","explanation":"method \"query\" does not match ^[A-Z]{3,32}$","task_id":"t-1"}
}

func ExampleParseURI() {
	u, err := agtp.ParseURI("agtp://agtp.acme.com/agents/bookbot.agtp?format=json")
	if err != nil {
		fmt.Println(err)
		return
	}
	c, redirect := u.Canonical()
	fmt.Println(u.Form, u.AgentName, u.Address(), u.Format())
	fmt.Println(redirect, c)
	// Output:
	// 4 bookbot agtp.acme.com:4480 json
	// true agtp://agtp.acme.com/agents/bookbot?format=json
}

func ExampleScopeSet_Covers() {
	declared, _ := agtp.ParseScopes("documents:read, booking:*")
	claimed, _ := agtp.ParseScopes("booking:hotel ,documents:read")
	_, ok := declared.CoversAll(claimed)
	fmt.Println(claimed, ok)
	// Output: booking:hotel, documents:read true
}
