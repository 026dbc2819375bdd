"""conformance: every exporter and feature checked against eager PyTorch over a zoo of tiny models."""
