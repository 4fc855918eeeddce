"""The GNN models and their kernels: SAGE/GCN/GAT over sampled blocks, the R-GCN,
full-graph units, hash dropout and bf16 aggregation."""
