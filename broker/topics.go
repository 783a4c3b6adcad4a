package broker

// startTopics starts the topics manager (actors/partition) and sets Env.Topics.
// Until the data path is wired, no topic API is registered and this is a no-op.
func (b *Broker) startTopics() error { return nil }
