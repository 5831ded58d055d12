"""Analysis of a network around its parameters: Jacobians, the empirical NTK, stability
bounds (λ_max of the Gauss–Newton matrix) and probes of the learnt features."""
