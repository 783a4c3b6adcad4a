package broker

// startGroups starts the groups manager (actors/group) and sets Env.Groups.
// Until the group coordinator is wired, no group API is registered and this is a no-op.
func (b *Broker) startGroups() error { return nil }
