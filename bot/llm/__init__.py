"""The model side: the Replier protocol, the Claude and offline repliers, prompt building."""
