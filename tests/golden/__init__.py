"""Golden data from real flax 0.5.3 and the fidelity case grid."""
