package tasks

import (
	"context"
	"fmt"
	"testing"

	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/testkit"
)

// AIP-158: ListEscalations pages the pending escalations in (raised
// time, escalation ID) order, all of them or those routed to one
// recipient; a token of one filter is refused with another.
func TestListEscalationsPages(t *testing.T) {
	c, _ := start(t, Options{})
	ctx := context.Background()
	var all, toReviewer []paging.ZPos
	for i := range 7 {
		recipient := reviewer
		if i%3 == 1 {
			recipient = stranger
		}
		r, err := c.Escalate(ctx, &taskv1.EscalateRequest{CallerAgentId: owner, TaskId: fmt.Sprintf("t-%d", i),
			Reason: "ethical_flag", Context: testkit.JSONValue(`{}`), Recipient: recipient})
		if err != nil {
			t.Fatal(err)
		}
		e := r.GetEscalation()
		p := paging.ZPos{Score: float64(e.GetCreatedAt().AsTime().UnixMilli()), Member: e.GetEscalationId()}
		all = append(all, p)
		if recipient == reviewer {
			toReviewer = append(toReviewer, p)
		}
	}
	list := func(routedTo string) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := c.ListEscalations(ctx, &taskv1.ListEscalationsRequest{Principal: "ops", RoutedTo: routedTo, PageSize: size, PageToken: tok})
			var got []string
			for _, e := range r.GetEscalations() {
				got = append(got, e.GetEscalationId())
			}
			return got, r.GetNextPageToken(), err
		}
	}
	for _, size := range []int32{1, 2, 3} {
		tok := testkit.CheckPaging(t, size, testkit.ZMembers(all), list(""))
		testkit.CheckTokenMismatch(t, tok, list(reviewer))
		tok = testkit.CheckPaging(t, size, testkit.ZMembers(toReviewer), list(reviewer))
		testkit.CheckTokenMismatch(t, tok, list(stranger))
	}
}

// AIP-158: ListInbox pages an agent's inbox in delivery order; a token
// of one agent's inbox is refused for another's.
func TestListInboxPages(t *testing.T) {
	c, _ := start(t, Options{})
	ctx := context.Background()
	var want []string
	for i := range 5 {
		r, err := c.Notify(ctx, &taskv1.NotifyRequest{SenderAgentId: owner, Recipient: reviewer, Content: testkit.JSONValue(fmt.Sprintf(`{"n":%d}`, i))})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.GetNotification().GetNotificationId())
	}
	list := func(agent string) testkit.ListPage {
		return func(size int32, tok string) ([]string, string, error) {
			r, err := c.ListInbox(ctx, &taskv1.ListInboxRequest{AgentId: agent, PageSize: size, PageToken: tok})
			var got []string
			for _, e := range r.GetEntries() {
				got = append(got, e.GetNotificationId())
			}
			return got, r.GetNextPageToken(), err
		}
	}
	for _, size := range []int32{1, 2, 4} {
		tok := testkit.CheckPaging(t, size, want, list(reviewer))
		testkit.CheckTokenMismatch(t, tok, list(stranger))
	}
}
