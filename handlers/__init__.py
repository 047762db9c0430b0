"""Lambda entry points: thin modules over ``weft_serverless.aws``."""
