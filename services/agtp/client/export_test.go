package client

// TCPPools is the number of TCP connection pools c keeps.
func TCPPools(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tcp)
}
