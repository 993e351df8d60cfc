"""Shape-generic tuning (DietCode, /work/shared/design/DIETCODE.md): the measurement database, the
kernel-set cover and the C shape dispatcher."""
