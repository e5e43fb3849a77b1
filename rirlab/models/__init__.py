"""Models: recursive cells, encoders, heads; ``registry`` maps names to builders."""
