"""Prints an HS256 JWT of the claims (JSON) given, minted with PyJWT as an
app's backend would: mint_jwt.py SECRET CLAIMS_JSON."""
import json
import sys

import jwt

secret, claims = sys.argv[1], json.loads(sys.argv[2])
print(jwt.encode(claims, secret, algorithm="HS256"))
