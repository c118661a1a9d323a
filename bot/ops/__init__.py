"""Operations: metrics, logging, access lists, cost guards, inspection."""
