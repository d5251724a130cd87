//! Request bodies: decode into a `Conversation`, encode back byte-faithfully.
