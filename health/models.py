"""Session health lives here once the health work lands (see ROADMAP.md); the app is installed now so
its migrations and API router have a home."""
