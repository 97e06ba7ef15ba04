"""Pure search maths: vector storage and top-k, score fusion, full-text tokenisation."""
