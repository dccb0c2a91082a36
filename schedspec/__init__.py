"""A formally checked specification of the vLLM 0.33.0 V1 scheduler."""
