"""HTTP API: one APIRouter per resource."""
