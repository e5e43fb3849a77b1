"""MLflow runs -> pandas -> ablation tables (Markdown/LaTeX/CSV) and plots."""
