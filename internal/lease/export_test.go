package lease

// Abandon stops the renewer without releasing: the holder's process died.
func (l *Lease) Abandon() { l.stopRenewer() }
