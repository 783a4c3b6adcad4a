package fence

// Checker is a fence that can look at its peers again on demand, outside its own
// schedule: the ownership controller asks it when the registry sees a peer go, so that a
// peer killed -9 (its lock free at once) is found lapsed in moments, not at the next
// renewal round.
type Checker interface {
	CheckPeers()
}

// CheckPeers reads every peer's lease and probes its lock now.
func (f *File) CheckPeers() { f.watchPeers() }
