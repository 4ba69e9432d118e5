"""The app shell: settings, the composition root, the FastAPI factory, middleware and ``api/``
(one APIRouter per resource).

Import the factory from :mod:`router.app.factory`; this package stays empty so importing
``router.app.settings`` does not load the whole app."""
