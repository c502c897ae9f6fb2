//go:build !race

package rawsock

func raceBeforeWrite(uintptr) {}

func raceAfterWrite([]byte) {}

func raceAfterRead(uintptr, []byte) {}
