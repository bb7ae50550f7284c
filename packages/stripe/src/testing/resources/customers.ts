/** Customers (`/v1/customers`): create, retrieve, list by email. */
import type { FormValue } from '../form.js';
import { newId, type ResourceStore, type StripeObject } from './objects.js';
import { invalid, metadata, str } from './params.js';
import { type CreatedObject, defineResource, type RouteInput } from './resource.js';

const CUSTOMER_CREATE_PARAMS = [
  'email',
  'name',
  'description',
  'metadata',
  'phone',
  'payment_method',
  'address',
  'shipping',
  'invoice_settings',
  'preferred_locales',
  'expand',
] as const;

/** A customer. */
function createCustomer(_store: ResourceStore, input: RouteInput): CreatedObject {
  const p = input.params;
  const email = str(p, 'email');
  if (email !== undefined && email.length > 512) {
    throw invalid('Invalid email address', 'email', 'email_invalid');
  }
  const id = newId('cus');
  const customer: StripeObject = {
    id,
    object: 'customer',
    address: (p.address as FormValue | undefined) ?? null,
    created: input.nowSeconds,
    description: str(p, 'description') ?? null,
    email: email ?? null,
    invoice_prefix: id.slice(4, 12).toUpperCase(),
    livemode: false,
    metadata: metadata(p),
    name: str(p, 'name') ?? null,
    phone: str(p, 'phone') ?? null,
  };
  return { object: customer };
}

/** The routes `customers.create`, `.retrieve` and `.list`. */
export const customers = defineResource({
  collection: 'customers',
  kind: 'customer',
  createParams: CUSTOMER_CREATE_PARAMS,
  create: createCustomer,
  listParams: ['email'],
  listFilter: (params) => {
    const email = str(params, 'email');
    return (o) => !email || o.email === email;
  },
});
