package kit_test

import (
	"context"
	"testing"
	"time"

	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	channelzservice "google.golang.org/grpc/channelz/service"

	"github.com/agtpsuite/agtp/services/testkit"
)

// A connection between two of the suite's services runs with fixed
// flow-control windows on both sides, far above grpc-go's 64 KiB start:
// with the default, growing windows, every call that carries data makes
// the receiver send a PING to estimate the bandwidth, and the sender
// answer it. channelz shows the client's socket: its own receive window
// (set by DialService) and the window the server granted it (set by
// NewServer).
func TestInternalConnectionsUseFixedFlowControlWindows(t *testing.T) {
	// grpc-go's channelz service; importing it turns channelz on for the
	// process, so the connections below are tracked.
	cz := channelzpb.NewChannelzClient(testkit.ServeGRPC(t, channelzservice.RegisterChannelzServiceToServer))
	b, _ := startServer(t, "catalogsvc")
	conn := dialCatalogsvc(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := checkHealth(ctx, conn, ""); err != nil {
		t.Fatal(err)
	}

	var socket *channelzpb.SocketData
	testkit.WaitFor(t, 5*time.Second, "the connection's socket in channelz", func() bool {
		socket = clientSocket(ctx, t, cz, b.Server.GRPCAddr())
		return socket != nil
	})
	const atLeast = 1 << 20 // the defaults would show 65,535
	local, remote := socket.GetLocalFlowControlWindow().GetValue(), socket.GetRemoteFlowControlWindow().GetValue()
	if local < atLeast || remote < atLeast {
		t.Fatalf("flow-control windows: the client's own %d, granted by the server %d; want both at least %d", local, remote, atLeast)
	}
}

// clientSocket is the data of the socket of the channel to target, or nil
// while there is none.
func clientSocket(ctx context.Context, t *testing.T, cz channelzpb.ChannelzClient, target string) *channelzpb.SocketData {
	t.Helper()
	top, err := cz.GetTopChannels(ctx, &channelzpb.GetTopChannelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range top.GetChannel() {
		if ch.GetData().GetTarget() != target {
			continue
		}
		for _, ref := range ch.GetSubchannelRef() {
			sub, err := cz.GetSubchannel(ctx, &channelzpb.GetSubchannelRequest{SubchannelId: ref.GetSubchannelId()})
			if err != nil {
				t.Fatal(err)
			}
			for _, sref := range sub.GetSubchannel().GetSocketRef() {
				s, err := cz.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: sref.GetSocketId()})
				if err != nil {
					t.Fatal(err)
				}
				return s.GetSocket().GetData()
			}
		}
	}
	return nil
}
