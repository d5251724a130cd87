//! Token estimators: tiktoken (o200k) and a fast char estimate; image token rules.
