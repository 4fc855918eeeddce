"""What the machine runs a step with: CPU capabilities, the precision of a step, the allocator."""
