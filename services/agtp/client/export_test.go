package client

// TCPPools is the number of TCP connection pools c keeps.
func TCPPools(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tcp)
}

// QUICConns is the number of QUIC connections (or dials) c keeps.
func QUICConns(c *Client) int {
	c.mu.Lock()
	q := c.quic
	c.mu.Unlock()
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.conns)
}
